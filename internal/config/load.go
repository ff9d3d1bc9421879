package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// LoadManifest reads, validates and completes a YAML or JSON manifest (JSON
// is parsed as YAML). Every error is a *ManifestError; several are joined
// with errors.Join so one run reports all of them.
func LoadManifest(path string) (*Manifest, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &ManifestError{File: path, Msg: fmt.Sprintf("cannot read manifest: %v", unwrapPathError(err))}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, &ManifestError{File: path, Msg: fmt.Sprintf("cannot resolve path: %v", err)}
	}
	return parseManifest(data, path, abs)
}

func unwrapPathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

var yamlLineRE = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// parseManifest does the work of LoadManifest; name is used in messages and
// abs to resolve relative paths.
func parseManifest(data []byte, name, abs string) (*Manifest, error) {
	root, err := decodeSingleDocument(data)
	if err != nil {
		me := &ManifestError{File: name, Msg: err.Error()}
		if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
			me.Line, _ = strconv.Atoi(m[1])
			me.Msg = "invalid YAML: " + m[2]
			if zeroBasedYAMLError(m[2]) {
				me.Line++
			}
		}
		return nil, me
	}
	d := &manifestDecoder{file: name, dir: filepath.Dir(abs)}
	m := d.manifest(root)
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	m.Path = abs
	m.Dir = d.dir
	return m, nil
}

// zeroBasedYAMLError reports whether a go-yaml message comes from its
// parser (not its scanner): go-yaml numbers those lines from 0.
func zeroBasedYAMLError(msg string) bool {
	switch msg {
	case "did not find expected key", "did not find expected node content",
		"did not find expected '-' indicator", "did not find expected ',' or ']'",
		"did not find expected ',' or '}'":
		return true
	}
	return false
}

// decodeSingleDocument parses exactly one YAML document; a second one is
// almost always a mistake (two manifests pasted together).
func decodeSingleDocument(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty manifest")
		}
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("yaml: line %d: a manifest holds one document, found a second", extra.Line)
	} else if !errors.Is(err, io.EOF) {
		return nil, err
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0], nil
	}
	return nil, errors.New("empty manifest")
}
