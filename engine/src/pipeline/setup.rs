//! The prompt setup: which renderer plugin, which label scheme and which readout a question
//! is read with, and who chose them.
//!
//! The same weights answer better or worse depending on how they are asked, so the server's
//! default setup is measured (`decide tune`, [`crate::tune`]) unless the operator pins a
//! renderer. A tenant (`settings.renderer`) or a request (`extra.renderer`,
//! `extra.backend_options.labels` / `readout`) can choose differently; the tuned label scheme
//! and readout belong to the tuned renderer, so they apply only when the question is rendered
//! by it. Every answer's audit block names the setup and where it came from.

use crate::readout::{self, Choice, Scheme};

/// Who chose a setup, highest priority first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetupSource {
    /// `extra.renderer` of the request.
    Request,
    /// The tenant's `settings.renderer`.
    Tenant,
    /// The operator's `--renderer`.
    Pinned,
    /// `decide tune` (or startup tuning) measured it best, by a clear margin.
    Tuned,
    /// Nothing pinned or measured: the built-in default renderer with letters.
    Default,
}

impl SetupSource {
    pub fn as_str(self) -> &'static str {
        match self {
            SetupSource::Request => "request",
            SetupSource::Tenant => "tenant",
            SetupSource::Pinned => "pinned",
            SetupSource::Tuned => "tuned",
            SetupSource::Default => "default",
        }
    }
}

/// The renderer every setup is compared with, and the one served when nothing is measured.
pub const DEFAULT_RENDERER: &str = "direct-options";

/// A renderer with its label scheme and readout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setup {
    pub renderer: String,
    pub labels: Scheme,
    /// `auto` or `permutation`: what a request that names no readout is read with.
    pub readout: Choice,
    pub source: SetupSource,
}

impl Setup {
    /// The built-in default: `direct-options`, letters, `auto`.
    pub fn default_setup() -> Setup {
        Setup {
            renderer: DEFAULT_RENDERER.to_string(),
            labels: Scheme::Letters,
            readout: Choice::Auto,
            source: SetupSource::Default,
        }
    }

    /// The operator's `--renderer`, read with letters and `auto`.
    pub fn pinned(renderer: &str) -> Setup {
        Setup {
            renderer: renderer.to_string(),
            source: SetupSource::Pinned,
            ..Setup::default_setup()
        }
    }

    /// `renderer+labels+readout`, e.g. `plain-letter+words+auto`: how tune names candidates.
    pub fn label(&self) -> String {
        format!(
            "{}+{}+{}",
            self.renderer,
            self.labels.as_str(),
            self.readout.as_str()
        )
    }

    /// Parses [`Setup::label`] (the source is not part of it).
    pub fn parse_label(text: &str, source: SetupSource) -> Option<Setup> {
        let mut parts = text.rsplitn(3, '+');
        let readout = Choice::parse(parts.next()?)?;
        let labels = Scheme::parse(parts.next()?)?;
        let renderer = parts.next()?.to_string();
        (!renderer.is_empty() && matches!(readout, Choice::Auto | Choice::Permutation)).then_some(
            Setup {
                renderer,
                labels,
                readout,
                source,
            },
        )
    }
}

/// What one request is read with: its renderer name, readout options with the label scheme
/// and readout filled in, and who chose the renderer.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub renderer: String,
    pub options: readout::Options,
    pub source: SetupSource,
}

/// Resolves a request's setup: the request's renderer, else the tenant's, else the server's;
/// the server's label scheme and readout fill what the request leaves open only when its
/// renderer is the server's.
pub fn resolve(
    server: &Setup,
    tenant_renderer: Option<&str>,
    request_renderer: Option<&str>,
    requested: &readout::Options,
) -> Resolved {
    let (renderer, source) = match (request_renderer, tenant_renderer) {
        (Some(name), _) => (name.to_string(), SetupSource::Request),
        (None, Some(name)) => (name.to_string(), SetupSource::Tenant),
        (None, None) => (server.renderer.clone(), server.source),
    };
    let mut options = *requested;
    let servers_renderer = renderer == server.renderer;
    if options.labels.is_none() {
        options.labels = Some(if servers_renderer {
            server.labels
        } else {
            Scheme::Letters
        });
    }
    if options.choice == Choice::Auto && servers_renderer {
        options.choice = server.readout;
    }
    Resolved {
        renderer,
        options,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuned() -> Setup {
        Setup {
            renderer: "plain-letter".into(),
            labels: Scheme::Words,
            readout: Choice::Permutation,
            source: SetupSource::Tuned,
        }
    }

    #[test]
    fn labels_round_trip() {
        let setup = tuned();
        assert_eq!(setup.label(), "plain-letter+words+permutation");
        assert_eq!(
            Setup::parse_label(&setup.label(), SetupSource::Tuned),
            Some(setup)
        );
        let dashed = Setup::parse_label("my+renderer+numbers+auto", SetupSource::Tuned).unwrap();
        assert_eq!(dashed.renderer, "my+renderer");
        assert_eq!(
            Setup::parse_label("x+letters+two-stage", SetupSource::Tuned),
            None
        );
        assert_eq!(
            Setup::parse_label("+letters+auto", SetupSource::Tuned),
            None
        );
        assert_eq!(Setup::parse_label("x+bold+auto", SetupSource::Tuned), None);
    }

    #[test]
    fn the_server_setup_fills_only_what_its_own_renderer_leaves_open() {
        let server = tuned();
        let open = readout::Options::default();
        let r = resolve(&server, None, None, &open);
        assert_eq!(
            (
                r.renderer.as_str(),
                r.source,
                r.options.labels,
                r.options.choice
            ),
            (
                "plain-letter",
                SetupSource::Tuned,
                Some(Scheme::Words),
                Choice::Permutation
            )
        );
        // A tenant's renderer reads with letters and auto.
        let r = resolve(&server, Some("framed"), None, &open);
        assert_eq!(
            (r.source, r.options.labels, r.options.choice),
            (SetupSource::Tenant, Some(Scheme::Letters), Choice::Auto)
        );
        // The request wins over the tenant, and what it names stays.
        let named = readout::Options {
            choice: Choice::Direct,
            labels: Some(Scheme::Numbers),
            ..readout::Options::default()
        };
        let r = resolve(&server, Some("framed"), Some("plain-letter"), &named);
        assert_eq!(
            (
                r.renderer.as_str(),
                r.source,
                r.options.labels,
                r.options.choice
            ),
            (
                "plain-letter",
                SetupSource::Request,
                Some(Scheme::Numbers),
                Choice::Direct
            )
        );
    }
}
