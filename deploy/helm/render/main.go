// Command render renders a Helm chart's templates as `helm template` does, for machines without
// helm: no helm binary can be installed from the package registries this project's machines and
// CI reach, but Go, Go's text/template and sprig (the template language and function library
// helm's engine is made of) come from Debian's packages. deploy/helm/render.sh builds and runs it;
// where `helm` is installed, deploy/validate.sh also renders with helm itself.
//
//	render [-f VALUES.yaml]... [-name RELEASE] [-namespace NS] CHART_DIR OUT_DIR
//
// writes OUT_DIR/<template>.yaml for every template of CHART_DIR/templates whose output is not
// empty, each the template's documents separated by `---` (helm's `# Source:` lines left out).
//
// What it does as helm's engine (helm.sh/helm/v3/pkg/engine) does: every file of templates/ is
// parsed into one set (so `define`s in _helpers.tpl are seen everywhere), files whose names start
// with `_` are not rendered; the functions are sprig's (less env and expandenv) plus include,
// tpl, required, toYaml, fromYaml, toJson, fromJson and fail; missing keys render as empty
// (missingkey=zero, "<no value>" removed); values are values.yaml deep-merged with each -f file in
// order (a null removes a key); the top-level object holds .Values, .Release (Name, Namespace,
// Service "Helm", IsInstall, Revision 1), .Chart (Chart.yaml, keys capitalised as helm's) and
// .Template (Name, BasePath). Not there: subcharts, .Files, .Capabilities, lookup, --set.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"text/template"

	// Debian's packages lay sprig v3 out at its GOPATH path without the /v3; render.sh builds
	// in GOPATH mode over /usr/share/gocode, offline.
	"github.com/Masterminds/sprig"
	yaml "gopkg.in/yaml.v2"
)

type valueFiles []string

func (v *valueFiles) String() string     { return strings.Join(*v, ",") }
func (v *valueFiles) Set(s string) error { *v = append(*v, s); return nil }

func main() {
	var files valueFiles
	flag.Var(&files, "f", "values file merged over the chart's values.yaml (repeatable)")
	name := flag.String("name", "decide", "release name (.Release.Name)")
	namespace := flag.String("namespace", "default", "release namespace (.Release.Namespace)")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: render [-f VALUES.yaml]... [-name RELEASE] [-namespace NS] CHART_DIR OUT_DIR")
		os.Exit(2)
	}
	if err := run(flag.Arg(0), flag.Arg(1), *name, *namespace, files); err != nil {
		fmt.Fprintln(os.Stderr, "render:", err)
		os.Exit(1)
	}
}

func run(chartDir, outDir, release, namespace string, valueFiles []string) error {
	meta, err := readYAML(filepath.Join(chartDir, "Chart.yaml"))
	if err != nil {
		return err
	}
	chart := map[string]interface{}{}
	for k, v := range meta {
		chart[strings.ToUpper(k[:1])+k[1:]] = v
	}
	chartName, _ := chart["Name"].(string)
	values, err := readYAML(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return err
	}
	for _, f := range valueFiles {
		override, err := readYAML(f)
		if err != nil {
			return err
		}
		values = merge(values, override)
	}

	paths, err := filepath.Glob(filepath.Join(chartDir, "templates", "*"))
	if err != nil {
		return err
	}
	sort.Strings(paths)
	set := template.New("chart")
	funcs := funcMap(set)
	set.Funcs(funcs).Option("missingkey=zero")
	var rendered []string
	for _, p := range paths {
		base := filepath.Base(p)
		if !strings.HasSuffix(base, ".yaml") && !strings.HasSuffix(base, ".tpl") {
			continue
		}
		text, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		full := chartName + "/templates/" + base
		if _, err := set.New(full).Parse(string(text)); err != nil {
			return err
		}
		if !strings.HasPrefix(base, "_") {
			rendered = append(rendered, full)
		}
	}

	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	for _, full := range rendered {
		top := map[string]interface{}{
			"Values":   values,
			"Chart":    chart,
			"Release":  map[string]interface{}{"Name": release, "Namespace": namespace, "Service": "Helm", "IsInstall": true, "IsUpgrade": false, "Revision": 1},
			"Template": map[string]interface{}{"Name": full, "BasePath": chartName + "/templates"},
		}
		var buf bytes.Buffer
		if err := set.ExecuteTemplate(&buf, full, top); err != nil {
			return err
		}
		docs := splitManifests(strings.ReplaceAll(buf.String(), "<no value>", ""))
		if len(docs) == 0 {
			continue
		}
		out := filepath.Join(outDir, filepath.Base(full))
		if err := os.WriteFile(out, []byte(strings.Join(docs, "\n---\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// splitManifests splits one template's output into its documents as helm's releaseutil does,
// dropping the empty ones (a document of comments only is kept: it is not empty text).
func splitManifests(s string) []string {
	sep := regexp.MustCompile(`(?:^|\s*\n)---\s*`)
	var docs []string
	for _, d := range sep.Split(strings.TrimSpace(s), -1) {
		if d = strings.TrimSpace(d); d != "" {
			docs = append(docs, d)
		}
	}
	return docs
}

func funcMap(set *template.Template) template.FuncMap {
	f := sprig.TxtFuncMap()
	delete(f, "env")
	delete(f, "expandenv")
	f["toYaml"] = func(v interface{}) string {
		b, err := yaml.Marshal(v)
		if err != nil {
			return ""
		}
		return strings.TrimSuffix(string(b), "\n")
	}
	f["fromYaml"] = func(s string) map[string]interface{} {
		var v interface{}
		if err := yaml.Unmarshal([]byte(s), &v); err != nil {
			return map[string]interface{}{"Error": err.Error()}
		}
		m, _ := normalize(v).(map[string]interface{})
		return m
	}
	f["toJson"] = func(v interface{}) string {
		b, _ := json.Marshal(v)
		return string(b)
	}
	f["fromJson"] = func(s string) map[string]interface{} {
		m := map[string]interface{}{}
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			m["Error"] = err.Error()
		}
		return m
	}
	f["required"] = func(message string, v interface{}) (interface{}, error) {
		if v == nil {
			return v, errors.New(message)
		}
		if s, ok := v.(string); ok && s == "" {
			return v, errors.New(message)
		}
		return v, nil
	}
	f["fail"] = func(message string) (string, error) { return "", errors.New(message) }
	f["include"] = func(name string, data interface{}) (string, error) {
		var buf bytes.Buffer
		err := set.ExecuteTemplate(&buf, name, data)
		return buf.String(), err
	}
	f["tpl"] = func(text string, data interface{}) (string, error) {
		t, err := set.Clone()
		if err != nil {
			return "", err
		}
		t, err = t.New("tpl").Parse(text)
		if err != nil {
			return "", err
		}
		var buf bytes.Buffer
		err = t.Execute(&buf, data)
		return strings.ReplaceAll(buf.String(), "<no value>", ""), err
	}
	return f
}

func readYAML(path string) (map[string]interface{}, error) {
	text, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v interface{}
	if err := yaml.Unmarshal(text, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if v == nil {
		return map[string]interface{}{}, nil
	}
	m, ok := normalize(v).(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("%s: not a mapping", path)
	}
	return m, nil
}

// normalize turns yaml.v2's map[interface{}]interface{} into map[string]interface{}, the shape
// helm's values have (and sprig's dict functions expect).
func normalize(v interface{}) interface{} {
	switch t := v.(type) {
	case map[interface{}]interface{}:
		m := make(map[string]interface{}, len(t))
		for k, val := range t {
			m[fmt.Sprint(k)] = normalize(val)
		}
		return m
	case []interface{}:
		for i := range t {
			t[i] = normalize(t[i])
		}
		return t
	default:
		return v
	}
}

// merge deep-merges override into base as helm coalesces values files: maps merge key by key,
// anything else is replaced, and a null removes the key.
func merge(base, override map[string]interface{}) map[string]interface{} {
	out := make(map[string]interface{}, len(base))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range override {
		if v == nil {
			delete(out, k)
			continue
		}
		if bm, ok := out[k].(map[string]interface{}); ok {
			if om, ok := v.(map[string]interface{}); ok {
				out[k] = merge(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}
