//! Readouts: how a question's option set becomes model reads and one distribution.
//!
//! - [`Choice::Direct`]: one single-letter label per option (`A`..`Z`), one read.
//! - [`Choice::WideDirect`]: `A`..`Z` then letter pairs that are single tokens of the model's
//!   vocabulary ([`labels`]); one read, exact over the whole vocabulary.
//! - [`Choice::TwoStage`]: a yes/no read per option, then a direct read of the shortlist
//!   ([`two_stage`]); for more options than any label set holds.
//! - [`Choice::Permutation`]: the single-read readout repeated under cyclic label shifts and
//!   averaged ([`permutation`]); measures and reduces label-order bias.
//! - [`Choice::Auto`] (default): the first of direct, wide-direct, two-stage that holds the
//!   options.
//!
//! This module is pure planning and arithmetic: [`Plan::asks`] says which questions to read
//! with which labels, [`Plan::combine`] turns the reads into a [`Combined`] result (or the
//! asks of a second round). The pipeline renders, batches and reads. An explicit readout that
//! cannot hold a question's options refuses that question with a reason.

pub mod labels;
pub mod permutation;
pub mod two_stage;

use decide_models::Readout;

pub use labels::{LabelSets, Scheme};

use crate::plugins::CompiledQuestion;

/// The readout a request asks for (`extra.backend_options.readout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Choice {
    #[default]
    Auto,
    Direct,
    WideDirect,
    TwoStage,
    Permutation,
}

impl Choice {
    /// Every accepted name, for messages.
    pub const NAMES: [&'static str; 5] =
        ["auto", "direct", "wide-direct", "two-stage", "permutation"];

    /// Parses a readout name.
    pub fn parse(name: &str) -> Option<Choice> {
        Some(match name {
            "auto" => Choice::Auto,
            "direct" => Choice::Direct,
            "wide-direct" => Choice::WideDirect,
            "two-stage" => Choice::TwoStage,
            "permutation" => Choice::Permutation,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Choice::Auto => "auto",
            Choice::Direct => "direct",
            Choice::WideDirect => "wide-direct",
            Choice::TwoStage => "two-stage",
            Choice::Permutation => "permutation",
        }
    }
}

/// The readout options of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub choice: Choice,
    /// Finalists of `two-stage` (`extra.backend_options.shortlist`).
    pub shortlist: usize,
    /// Shifts of `permutation` (`extra.backend_options.permutations`).
    pub permutations: usize,
    /// The label scheme of single reads (`extra.backend_options.labels`); none: the server's
    /// setup (what `decide tune` chose, else letters).
    pub labels: Option<Scheme>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            choice: Choice::Auto,
            shortlist: two_stage::DEFAULT_SHORTLIST,
            permutations: permutation::DEFAULT_PERMUTATIONS,
            labels: None,
        }
    }
}

/// How one question is read.
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// One read with these labels (`direct` or `wide-direct`).
    Single {
        readout: Choice,
        labels: Vec<String>,
    },
    /// One read per shift, each with `labels` over the rotated list.
    Permutation {
        labels: Vec<String>,
        shifts: Vec<usize>,
    },
    /// Stage 1 over every option, then a direct read of `shortlist` finalists.
    TwoStage { shortlist: usize },
}

/// One model read a plan needs: a question (possibly derived from the original) and labels.
#[derive(Debug, Clone)]
pub struct Ask {
    pub question: CompiledQuestion,
    pub labels: Vec<String>,
}

/// What the reads of one question came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Combined {
    /// Scores the calibration policy gets, in option order: the raw label log-probabilities
    /// for single reads, `ln p` of the combined distribution otherwise (so T = 1 gives `p`).
    pub scores: Vec<f64>,
    /// True next-token mass on the labels of the read that decides (the mean over shifts for
    /// `permutation`; the finalists' read for `two-stage`).
    pub option_mass: f32,
    pub detail: Detail,
}

/// How an answer was read, for the audit block and `decide eval`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Detail {
    /// `direct`, `wide-direct`, `two-stage` or `permutation`.
    pub readout: &'static str,
    /// Labels of the options, in option order (of the finalists' read for `two-stage`).
    pub labels: Vec<String>,
    /// `two-stage`: each option's yes-share from stage 1, in option order.
    pub stage1: Option<Vec<f64>>,
    /// `two-stage`: option indices read directly in stage 2.
    pub shortlist: Option<Vec<usize>>,
    /// `permutation`: the shifts read.
    pub shifts: Option<Vec<usize>>,
    /// `permutation`: the top option (index) under each shift.
    pub shift_top: Option<Vec<usize>>,
}

/// A second round of reads (only `two-stage` has one).
#[derive(Debug, Clone)]
pub struct Pending {
    stage1: Vec<f64>,
    finalists: Vec<usize>,
    ask: Ask,
}

/// After a round: done, or one more ask.
#[derive(Debug, Clone)]
pub enum Step {
    Done(Combined),
    Again(Pending),
}

/// Plans the read of `question`, or says why `options` cannot hold it. A single read
/// (`direct`, or `auto` choosing it) takes its labels from the label scheme when the scheme
/// holds the question; everything else reads with letters.
pub fn plan(
    options: &Options,
    question: &CompiledQuestion,
    sets: &LabelSets,
) -> Result<Plan, String> {
    let count = question.options.len();
    let texts: Vec<&str> = question.options.iter().map(|o| o.text.as_str()).collect();
    let scheme = options.labels.unwrap_or_default();
    if matches!(options.choice, Choice::Auto | Choice::Direct) {
        if let Some(labels) = sets.scheme_labels(scheme, &texts) {
            return Ok(Plan::Single {
                readout: Choice::Direct,
                labels,
            });
        }
    }
    // `words` labels name options, not positions: a permutation cannot rotate them.
    if options.choice == Choice::Permutation && scheme == Scheme::Numbers {
        if let Some(labels) = sets.scheme_labels(scheme, &texts) {
            return Ok(Plan::Permutation {
                labels,
                shifts: permutation::shifts(count, options.permutations),
            });
        }
    }
    let single = |readout: Choice, labels: &[String], capacity_of: &str| {
        if count > labels.len() {
            Err(format!(
                "{count} options exceed the {capacity_of} readout's capacity of {} labels on this model{}; \
                 use readout `auto` (extra.backend_options.readout) or fewer options",
                labels.len(),
                sets.unavailable.as_deref().map(|w| format!(" ({w})")).unwrap_or_default()
            ))
        } else {
            Ok(Plan::Single {
                readout,
                labels: labels[..count].to_vec(),
            })
        }
    };
    match options.choice {
        Choice::Direct => single(Choice::Direct, &sets.direct, "direct"),
        Choice::WideDirect => single(Choice::WideDirect, &sets.wide, "wide-direct"),
        Choice::TwoStage => two_stage_plan(options, sets),
        Choice::Auto => {
            if count <= sets.direct_capacity() {
                single(Choice::Direct, &sets.direct, "direct")
            } else if count <= sets.wide_capacity() {
                single(Choice::WideDirect, &sets.wide, "wide-direct")
            } else {
                two_stage_plan(options, sets)
            }
        }
        Choice::Permutation => {
            let labels = if count <= sets.direct_capacity() {
                &sets.direct
            } else {
                &sets.wide
            };
            match single(
                Choice::Permutation,
                labels,
                "permutation (wide-direct labels)",
            )? {
                Plan::Single { labels, .. } => Ok(Plan::Permutation {
                    labels,
                    shifts: permutation::shifts(count, options.permutations),
                }),
                _ => unreachable!("single() plans a single read"),
            }
        }
    }
}

fn two_stage_plan(options: &Options, sets: &LabelSets) -> Result<Plan, String> {
    let capacity = sets.direct_capacity();
    if capacity < two_stage::MIN_SHORTLIST {
        return Err(format!(
            "the two-stage readout needs single-letter labels, and this model has {capacity}{}",
            sets.unavailable
                .as_deref()
                .map(|w| format!(" ({w})"))
                .unwrap_or_default()
        ));
    }
    Ok(Plan::TwoStage {
        shortlist: options.shortlist.min(capacity),
    })
}

impl Plan {
    /// The readout name reported for this plan.
    pub fn name(&self) -> &'static str {
        match self {
            Plan::Single { readout, .. } => readout.as_str(),
            Plan::Permutation { .. } => "permutation",
            Plan::TwoStage { .. } => "two-stage",
        }
    }

    /// The reads of the first round.
    pub fn asks(&self, question: &CompiledQuestion) -> Vec<Ask> {
        match self {
            Plan::Single { labels, .. } => vec![Ask {
                question: question.clone(),
                labels: labels.clone(),
            }],
            Plan::Permutation { labels, shifts } => shifts
                .iter()
                .map(|&shift| Ask {
                    question: permutation::rotated(question, shift),
                    labels: labels.clone(),
                })
                .collect(),
            Plan::TwoStage { .. } => question
                .options
                .iter()
                .map(|option| Ask {
                    question: two_stage::stage1_question(question, option),
                    labels: two_stage::stage1_labels(),
                })
                .collect(),
        }
    }

    /// Combines the first round's reads (one per ask, in order) into a result, or the second
    /// round's ask.
    pub fn combine(&self, question: &CompiledQuestion, reads: &[Readout]) -> Step {
        match self {
            Plan::Single { readout, labels } => Step::Done(Combined {
                scores: reads[0].logprobs.iter().map(|&l| f64::from(l)).collect(),
                option_mass: reads[0].option_mass,
                detail: Detail {
                    readout: readout.as_str(),
                    labels: labels.clone(),
                    ..Detail::default()
                },
            }),
            Plan::Permutation { labels, shifts } => {
                let per_shift: Vec<Vec<f64>> = reads
                    .iter()
                    .zip(shifts)
                    .map(|(read, &shift)| permutation::to_option_order(&read.logprobs, shift))
                    .collect();
                let mean = permutation::average(&per_shift);
                let mass = reads.iter().map(|r| r.option_mass).sum::<f32>() / reads.len() as f32;
                Step::Done(Combined {
                    scores: mean.iter().map(|p| p.ln()).collect(),
                    option_mass: mass,
                    detail: Detail {
                        readout: "permutation",
                        labels: labels.clone(),
                        shifts: Some(shifts.clone()),
                        shift_top: Some(per_shift.iter().map(|d| permutation::argmax(d)).collect()),
                        ..Detail::default()
                    },
                })
            }
            Plan::TwoStage { shortlist } => {
                let stage1: Vec<f64> = reads
                    .iter()
                    .map(|read| two_stage::yes_share(&read.logprobs))
                    .collect();
                let finalists = two_stage::shortlist(&stage1, *shortlist);
                let labels: Vec<String> = labels::letters().take(finalists.len()).collect();
                Step::Again(Pending {
                    ask: Ask {
                        question: two_stage::finalists_question(question, &finalists),
                        labels,
                    },
                    stage1,
                    finalists,
                })
            }
        }
    }
}

impl Pending {
    /// The second round's read.
    pub fn ask(&self) -> &Ask {
        &self.ask
    }

    /// The result, from the second round's read.
    pub fn finish(self, read: &Readout) -> Combined {
        let finalist_probs = permutation::to_option_order(&read.logprobs, 0);
        let probs = two_stage::combine(&self.stage1, &self.finalists, &finalist_probs);
        Combined {
            scores: probs.iter().map(|p| p.ln()).collect(),
            option_mass: read.option_mass,
            detail: Detail {
                readout: "two-stage",
                labels: self.ask.labels,
                stage1: Some(self.stage1),
                shortlist: Some(self.finalists),
                ..Detail::default()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::OptionDef;

    fn sets() -> LabelSets {
        LabelSets::select(|l| {
            l.len() == 1 || l.starts_with('A') || l.starts_with('B') || ["Yes", "No"].contains(&l)
        })
    }

    fn question(n: usize) -> CompiledQuestion {
        CompiledQuestion {
            instructions: Some("Pick.".into()),
            options: (0..n)
                .map(|i| OptionDef {
                    key: i.to_string(),
                    text: format!("o{i}"),
                    description: None,
                })
                .collect(),
        }
    }

    fn opts(choice: Choice) -> Options {
        Options {
            choice,
            ..Options::default()
        }
    }

    #[test]
    fn auto_picks_the_first_readout_that_fits() {
        let s = sets(); // direct 26, wide 78
        assert_eq!(
            plan(&opts(Choice::Auto), &question(26), &s).unwrap().name(),
            "direct"
        );
        assert_eq!(
            plan(&opts(Choice::Auto), &question(27), &s).unwrap().name(),
            "wide-direct"
        );
        assert_eq!(
            plan(&opts(Choice::Auto), &question(79), &s).unwrap().name(),
            "two-stage"
        );
        match plan(&opts(Choice::Auto), &question(28), &s).unwrap() {
            Plan::Single { labels, .. } => assert_eq!(&labels[25..], ["Z", "AA", "AB"]),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn explicit_readouts_that_cannot_hold_the_options_refuse_with_a_reason() {
        let s = sets();
        let why = plan(&opts(Choice::Direct), &question(27), &s).unwrap_err();
        assert!(
            why.contains("27 options") && why.contains("capacity of 26"),
            "{why}"
        );
        assert!(why.contains("extra.backend_options.readout"), "{why}");
        assert!(plan(&opts(Choice::WideDirect), &question(79), &s).is_err());
        assert!(plan(&opts(Choice::TwoStage), &question(200), &s).is_ok());
        assert!(plan(&opts(Choice::Permutation), &question(79), &s).is_err());
    }

    #[test]
    fn label_schemes_apply_to_single_reads_they_hold() {
        let s = sets();
        let with = |choice, labels| Options {
            choice,
            labels: Some(labels),
            ..Options::default()
        };
        let labels_of = |plan: Plan| match plan {
            Plan::Single { labels, .. } | Plan::Permutation { labels, .. } => labels,
            other => panic!("{other:?}"),
        };
        let numbers = plan(&with(Choice::Auto, Scheme::Numbers), &question(3), &s).unwrap();
        assert_eq!(numbers.name(), "direct");
        assert_eq!(labels_of(numbers), ["1", "2", "3"]);
        // Past nine options, numbers give way to letters.
        let ten = plan(&with(Choice::Auto, Scheme::Numbers), &question(10), &s).unwrap();
        assert_eq!(labels_of(ten)[9], "J");
        let mut yes_no = question(2);
        yes_no.options[0].text = "Yes".into();
        yes_no.options[1].text = "No".into();
        let words = plan(&with(Choice::Auto, Scheme::Words), &yes_no, &s).unwrap();
        assert_eq!(labels_of(words), ["Yes", "No"]);
        let other = plan(&with(Choice::Auto, Scheme::Words), &question(2), &s).unwrap();
        assert_eq!(labels_of(other), ["A", "B"]);
        // Words name options, so a permutation of a yes/no question reads letters.
        let rotated = plan(&with(Choice::Permutation, Scheme::Words), &yes_no, &s).unwrap();
        assert_eq!(labels_of(rotated), ["A", "B"]);
        let rotated = plan(
            &with(Choice::Permutation, Scheme::Numbers),
            &question(3),
            &s,
        )
        .unwrap();
        assert_eq!(labels_of(rotated), ["1", "2", "3"]);
    }

    #[test]
    fn two_stage_reads_every_option_then_the_shortlist() {
        let q = question(5);
        let plan = Plan::TwoStage { shortlist: 2 };
        let asks = plan.asks(&q);
        assert_eq!(asks.len(), 5);
        let yes_no = |yes: f32| Readout {
            logprobs: vec![yes.ln(), (1.0 - yes).ln()],
            option_mass: 1.0,
        };
        let reads: Vec<Readout> = [0.1, 0.8, 0.2, 0.6, 0.1].map(yes_no).to_vec();
        let Step::Again(pending) = plan.combine(&q, &reads) else {
            panic!("two rounds")
        };
        assert_eq!(pending.ask().question.options.len(), 2);
        assert_eq!(pending.ask().question.options[1].text, "o3");
        let finished = pending.finish(&Readout {
            logprobs: vec![0.2f32.ln(), 0.6f32.ln()],
            option_mass: 0.8,
        });
        let p: Vec<f64> = finished.scores.iter().map(|s| s.exp()).collect();
        assert!((p.iter().sum::<f64>() - 1.0).abs() < 1e-6, "{p:?}");
        assert!(
            p[3] > p[1],
            "the direct read decides between finalists: {p:?}"
        );
        assert_eq!(finished.detail.shortlist, Some(vec![1, 3]));
        assert_eq!(finished.option_mass, 0.8);
    }

    #[test]
    fn permutation_averages_over_shifts() {
        let q = question(3);
        let plan = plan(
            &Options {
                choice: Choice::Permutation,
                permutations: 3,
                ..Options::default()
            },
            &question(3),
            &sets(),
        )
        .unwrap();
        assert_eq!(plan.asks(&q).len(), 3);
        // A model that always answers A: every option is on top once; the mean is uniform.
        let always_a = Readout {
            logprobs: vec![0.9f32.ln(), 0.05f32.ln(), 0.05f32.ln()],
            option_mass: 1.0,
        };
        let Step::Done(done) = plan.combine(&q, &[always_a.clone(), always_a.clone(), always_a])
        else {
            panic!("one round")
        };
        for s in &done.scores {
            assert!((s.exp() - 1.0 / 3.0).abs() < 1e-6, "{:?}", done.scores);
        }
        assert_eq!(done.detail.shift_top, Some(vec![0, 1, 2]));
    }
}
