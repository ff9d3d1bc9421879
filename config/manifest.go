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
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Transport names how the sidecar talks to a handler's processes (docs/protocol.md).
type Transport string

// The two transports of protocol version 1.
const (
	TransportStdio Transport = "stdio"
	TransportUnix  Transport = "unix"
)

// Handler defaults (docs/manifest.md).
const (
	defaultProcesses       = 1
	defaultConcurrency     = 8
	defaultSyncConcurrency = 4
	defaultStartupTimeout  = 10 * time.Second
)

// Manifest is a validated manifest with every default filled in. Paths in it
// are absolute.
type Manifest struct {
	// Path is the manifest file's absolute path; Dir is its directory, the
	// base for relative paths in it.
	Path     string
	Dir      string
	Version  int
	Settings ManifestSettings
	Handlers []Handler
}

// ManifestSettings holds the manifest's optional `settings:` block; nil means
// "not given here", so a lower layer (the default) applies. ResolveSettings
// layers it under the environment and flags.
type ManifestSettings struct {
	ShutdownTimeout   *time.Duration
	SyncHandlerGrace  *time.Duration
	JobTimeout        *time.Duration
	HeartbeatInterval *time.Duration
	HeartbeatTimeout  *time.Duration
	CleanupInterval   *time.Duration
	PollInterval      *time.Duration
	ResultTTL         *time.Duration
	// Queues comes from `settings.queues` or the top-level `queues:` (one of
	// the two at most); nil means all queues.
	Queues []string

	// where maps a setting's manifest key to "file:line", so errors found
	// when layers are combined can still point at the manifest.
	where map[string]string
}

// Handler is one pool of long-lived handler processes.
type Handler struct {
	Name string
	// Command is the argv; Command[0] is absolute when the manifest gave a
	// relative path containing a '/', and a bare name (looked up in PATH)
	// otherwise.
	Command []string
	// Attach lists the Unix socket endpoints (paths or globs, absolute) of
	// handler processes the sidecar attaches to instead of spawning them
	// (attach.go); each endpoint is one process. Empty for a spawned
	// handler.
	Attach          []string
	Transport       Transport
	Processes       int
	Concurrency     int
	SyncConcurrency int
	// Env is the child's whole environment apart from the SONIQ_* protocol
	// variables. Never nil.
	Env map[string]string
	// EnvFrom names variables of the sidecar's own environment passed
	// through to the child when set (env wins for a name in both).
	EnvFrom        []string
	StartupTimeout time.Duration
	MaxJobs        int // recycle after about this many jobs; 0 = never
	MaxMemoryMB    int // soft RSS limit; 0 = none
	// Workdir is the child's working directory (absolute); it defaults to
	// the manifest's directory.
	Workdir string
	Jobs    []JobSpec
	// Line is where the handler is declared, for later errors such as a
	// hello that disagrees with the manifest.
	Line int
}

// JobSpec is one job name a handler serves.
type JobSpec struct {
	Name string
	// Cancellable selects the contract's branch: true = async (cancel and
	// NACK at shutdown_timeout), false = sync (never interrupted).
	Cancellable bool
	// Timeout applies only when TimeoutSet; otherwise the resolved
	// settings' job timeout does (see EffectiveTimeout). 0 = none.
	Timeout    time.Duration
	TimeoutSet bool
	Retry      RetryPolicy
	Line       int
}

// ManifestError is one problem in a manifest, located by file, line and
// field path (e.g. handlers[0].jobs[1].timeout).
type ManifestError struct {
	File  string // the path as the caller gave it
	Line  int    // 1-based; 0 when unknown
	Field string // empty when the problem is not about one field
	Msg   string
}

func (e *ManifestError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":")
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Job returns the handler's spec for a job name, or nil.
func (h *Handler) Job(name string) *JobSpec {
	for i := range h.Jobs {
		if h.Jobs[i].Name == name {
			return &h.Jobs[i]
		}
	}
	return nil
}

// JobNames lists the handler's job names in declaration order.
func (h *Handler) JobNames() []string {
	names := make([]string, len(h.Jobs))
	for i, j := range h.Jobs {
		names[i] = j.Name
	}
	return names
}

// Job finds the handler serving a job name and its spec; both are nil when
// the manifest does not declare it.
func (m *Manifest) Job(name string) (*Handler, *JobSpec) {
	for i := range m.Handlers {
		if j := m.Handlers[i].Job(name); j != nil {
			return &m.Handlers[i], j
		}
	}
	return nil, nil
}

// EffectiveTimeout is the job's own timeout when the manifest sets one, else
// the settings' job timeout. 0 means no timeout.
func (j *JobSpec) EffectiveTimeout(s Settings) time.Duration {
	if j.TimeoutSet {
		return j.Timeout
	}
	return s.JobTimeout
}

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
