package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"

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
	// (supervisor/attach.go); each endpoint is one process. Empty for a
	// spawned handler.
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

// manifestDecoder walks the YAML node tree, collecting every error with its
// line and field path rather than stopping at the first.
type manifestDecoder struct {
	file string
	dir  string
	errs []error
}

func (d *manifestDecoder) fail(n *yaml.Node, field, format string, args ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	d.errs = append(d.errs, &ManifestError{File: d.file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// yamlEntry is one key of a mapping with its value.
type yamlEntry struct {
	key *yaml.Node
	val *yaml.Node
}

// misplacedKeyHint explains keys people are likely to try that live
// elsewhere; "" for any other key.
func misplacedKeyHint(key string) string {
	switch key {
	case "max_attempts", "retries", "max_retries":
		return key + " is not a manifest field: the attempt budget lives on each job row (max_attempts, set at enqueue)"
	}
	return ""
}

// mapping checks that n is a mapping with only allowed keys, each once, and
// returns its entries by key. ok is false when n is not a mapping.
func (d *manifestDecoder) mapping(n *yaml.Node, field string, allowed ...string) (map[string]yamlEntry, bool) {
	n = derefAlias(n)
	if n.Kind != yaml.MappingNode {
		d.fail(n, field, "expected a mapping, got %s", describeNode(n))
		return nil, false
	}
	out := make(map[string]yamlEntry, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := derefAlias(n.Content[i]), n.Content[i+1]
		kf := fieldPath(field, k.Value)
		if k.Kind != yaml.ScalarNode || k.ShortTag() != "!!str" {
			d.fail(k, field, "keys must be strings, got %s", describeNode(k))
			continue
		}
		if prev, dup := out[k.Value]; dup {
			d.fail(k, kf, "duplicate key (first at line %d)", prev.key.Line)
			continue
		}
		if !slices.Contains(allowed, k.Value) {
			d.fail(k, kf, "%s", unknownKeyMessage(k.Value, allowed))
			continue
		}
		out[k.Value] = yamlEntry{key: k, val: v}
	}
	return out, true
}

func unknownKeyMessage(key string, allowed []string) string {
	if hint := misplacedKeyHint(key); hint != "" {
		return "unknown key: " + hint
	}
	best, bestDist := "", 3
	for _, a := range allowed {
		if dist := editDistance(key, a); dist < bestDist {
			best, bestDist = a, dist
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown key (did you mean %q?)", best)
	}
	sorted := append([]string(nil), allowed...)
	sort.Strings(sorted)
	return "unknown key (allowed: " + strings.Join(sorted, ", ") + ")"
}

// editDistance is the Levenshtein distance, for "did you mean" hints.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func fieldPath(parent, key string) string {
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func fieldIndex(parent string, i int) string {
	return fmt.Sprintf("%s[%d]", parent, i)
}

// derefAlias follows YAML aliases so anchors work anywhere.
func derefAlias(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// describeNode names a node's type the way a YAML author would recognise it.
func describeNode(n *yaml.Node) string {
	n = derefAlias(n)
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!str":
			return fmt.Sprintf("string %q", n.Value)
		case "!!int":
			return "integer " + n.Value
		case "!!float":
			return "number " + n.Value
		case "!!bool":
			return "boolean " + n.Value
		}
		return fmt.Sprintf("%s %q", n.ShortTag(), n.Value)
	}
	return "nothing"
}

func isScalarTag(n *yaml.Node, tag string) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == tag
}

func (d *manifestDecoder) str(n *yaml.Node, field string) (string, bool) {
	n = derefAlias(n)
	if !isScalarTag(n, "!!str") {
		hint := ""
		if n.Kind == yaml.ScalarNode && n.ShortTag() != "!!null" {
			hint = fmt.Sprintf(" (quote it: \"%s\")", n.Value)
		}
		d.fail(n, field, "expected a string, got %s%s", describeNode(n), hint)
		return "", false
	}
	return n.Value, true
}

func (d *manifestDecoder) integer(n *yaml.Node, field string) (int, bool) {
	n = derefAlias(n)
	if !isScalarTag(n, "!!int") {
		d.fail(n, field, "expected an integer, got %s", describeNode(n))
		return 0, false
	}
	var v int
	if err := n.Decode(&v); err != nil {
		d.fail(n, field, "integer %s out of range", n.Value)
		return 0, false
	}
	return v, true
}

func (d *manifestDecoder) boolean(n *yaml.Node, field string) (bool, bool) {
	n = derefAlias(n)
	if !isScalarTag(n, "!!bool") {
		d.fail(n, field, "expected true or false, got %s", describeNode(n))
		return false, false
	}
	var v bool
	if err := n.Decode(&v); err != nil {
		d.fail(n, field, "expected true or false, got %s", describeNode(n))
		return false, false
	}
	return v, true
}

// duration accepts a Go duration string or a plain (possibly fractional)
// number of seconds, as docs/manifest.md ("Durations") says.
func (d *manifestDecoder) duration(n *yaml.Node, field string) (time.Duration, bool) {
	n = derefAlias(n)
	if n.Kind != yaml.ScalarNode {
		d.fail(n, field, "expected a duration, got %s", describeNode(n))
		return 0, false
	}
	switch n.ShortTag() {
	case "!!str", "!!int", "!!float":
	default:
		d.fail(n, field, "expected a duration (like 30s or 1m30s, or seconds), got %s", describeNode(n))
		return 0, false
	}
	v, err := parseManifestDuration(n.Value)
	if err != nil {
		d.fail(n, field, "%v", err)
		return 0, false
	}
	return v, true
}

func parseManifestDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if v, err := time.ParseDuration(s); err == nil {
		if v < 0 {
			return 0, fmt.Errorf("duration %q must not be negative", s)
		}
		return v, nil
	}
	if v, err := secondsToDuration(s); err == nil {
		return v, nil
	} else if !errors.Is(err, errNotANumber) {
		return 0, err
	}
	return 0, fmt.Errorf("invalid duration %q (want a Go duration like 30s or 1m30s, or a number of seconds)", s)
}

var errNotANumber = errors.New("not a number")

// secondsToDuration parses a plain number of seconds (fractions allowed),
// the form Soniq uses in its environment variables.
func secondsToDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, errNotANumber
	}
	switch {
	case math.IsNaN(f):
		return 0, fmt.Errorf("invalid duration %q", s)
	case f < 0:
		return 0, fmt.Errorf("duration %q must not be negative", s)
	case math.IsInf(f, 0) || f*float64(time.Second) >= math.MaxInt64:
		return 0, fmt.Errorf("duration %q is too large", s)
	}
	return time.Duration(math.Round(f * float64(time.Second))), nil
}

// queueList reads a non-empty list of distinct queue names.
func (d *manifestDecoder) queueList(n *yaml.Node, field string) ([]string, bool) {
	n = derefAlias(n)
	if n.Kind != yaml.SequenceNode {
		d.fail(n, field, "expected a list of queue names, got %s", describeNode(n))
		return nil, false
	}
	if len(n.Content) == 0 {
		d.fail(n, field, "empty list: name at least one queue, or leave queues out to serve all queues")
		return nil, false
	}
	ok := true
	var out []string
	for i, item := range n.Content {
		f := fieldIndex(field, i)
		q, good := d.str(item, f)
		if !good {
			ok = false
			continue
		}
		if err := checkQueueName(q); err != nil {
			d.fail(item, f, "%v", err)
			ok = false
			continue
		}
		if slices.Contains(out, q) {
			d.fail(item, f, "duplicate queue %q", q)
			ok = false
			continue
		}
		out = append(out, q)
	}
	return out, ok
}

// checkQueueName rejects names that could not round-trip through the
// comma-separated SONIQ_QUEUES form.
func checkQueueName(q string) error {
	if q == "" {
		return errors.New("queue name must not be empty")
	}
	if strings.ContainsRune(q, ',') || strings.IndexFunc(q, unicode.IsSpace) >= 0 {
		return fmt.Errorf("queue name %q must not contain commas or spaces", q)
	}
	return nil
}

func (d *manifestDecoder) manifest(root *yaml.Node) *Manifest {
	m := &Manifest{}
	fields, ok := d.mapping(root, "", "version", "settings", "queues", "handlers")
	if !ok {
		return m
	}
	if e, ok := fields["version"]; !ok {
		d.fail(root, "version", "required: set version: 1")
	} else if v, ok := d.integer(e.val, "version"); ok {
		if v != 1 {
			d.fail(e.val, "version", "unsupported version %d (this sidecar reads version 1)", v)
		}
		m.Version = v
	}
	if e, ok := fields["settings"]; ok {
		m.Settings = d.settings(e.val, "settings")
	}
	if e, ok := fields["queues"]; ok {
		if line, dup := settingsQueuesLine(fields); dup {
			d.fail(e.key, "queues", "given twice: here and as settings.queues (line %d); keep one", line)
		} else if q, ok := d.queueList(e.val, "queues"); ok {
			m.Settings.Queues = q
		}
	}
	e, ok := fields["handlers"]
	if !ok {
		d.fail(root, "handlers", "required: declare at least one handler")
		return m
	}
	hn := derefAlias(e.val)
	if hn.Kind != yaml.SequenceNode {
		d.fail(hn, "handlers", "expected a list of handlers, got %s", describeNode(hn))
		return m
	}
	if len(hn.Content) == 0 {
		d.fail(hn, "handlers", "empty: declare at least one handler")
		return m
	}
	handlerAt := map[string]int{} // name -> index, for duplicate reports
	jobAt := map[string][2]int{}  // job name -> handler index, job index
	for i, item := range hn.Content {
		field := fieldIndex("handlers", i)
		h := d.handler(item, field)
		if h.Name != "" {
			if first, dup := handlerAt[h.Name]; dup {
				d.fail(nameNode(item), fieldPath(field, "name"), "duplicate handler name %q (first at handlers[%d], line %d)",
					h.Name, first, m.Handlers[first].Line)
			} else {
				handlerAt[h.Name] = i
			}
		}
		for j, job := range h.Jobs {
			if job.Name == "" {
				continue
			}
			jf := fieldPath(fieldIndex(fieldPath(field, "jobs"), j), "name")
			if first, dup := jobAt[job.Name]; dup {
				var firstLine int
				var firstHandler string
				if first[0] == i {
					firstLine, firstHandler = h.Jobs[first[1]].Line, h.Name
				} else {
					firstLine, firstHandler = m.Handlers[first[0]].Jobs[first[1]].Line, m.Handlers[first[0]].Name
				}
				d.errs = append(d.errs, &ManifestError{File: d.file, Line: job.Line, Field: jf, Msg: fmt.Sprintf(
					"job %q is already declared by handler %q at handlers[%d].jobs[%d] (line %d); a job name may belong to one handler only",
					job.Name, firstHandler, first[0], first[1], firstLine)})
				continue
			}
			jobAt[job.Name] = [2]int{i, j}
		}
		m.Handlers = append(m.Handlers, h)
	}
	return m
}

// nameNode returns the `name:` value node of a mapping, or the mapping.
func nameNode(n *yaml.Node) *yaml.Node {
	n = derefAlias(n)
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "name" {
				return n.Content[i+1]
			}
		}
	}
	return n
}

// settingsQueuesLine reports whether the settings block has a queues key,
// and its line.
func settingsQueuesLine(top map[string]yamlEntry) (int, bool) {
	e, ok := top["settings"]
	if !ok {
		return 0, false
	}
	n := derefAlias(e.val)
	for i := 0; i+1 < len(n.Content) && n.Kind == yaml.MappingNode; i += 2 {
		if n.Content[i].Value == "queues" {
			return n.Content[i].Line, true
		}
	}
	return 0, false
}

func (d *manifestDecoder) settings(n *yaml.Node, field string) ManifestSettings {
	var s ManifestSettings
	keys := []string{queuesKey}
	for _, sd := range settingTable {
		keys = append(keys, sd.key)
	}
	fields, ok := d.mapping(n, field, keys...)
	if !ok {
		return s
	}
	s.where = map[string]string{}
	for _, sd := range settingTable {
		e, ok := fields[sd.key]
		if !ok {
			continue
		}
		f := fieldPath(field, sd.key)
		v, ok := d.duration(e.val, f)
		if !ok {
			continue
		}
		if v == 0 && !sd.zeroValid {
			d.fail(derefAlias(e.val), f, "must be greater than zero")
			continue
		}
		*sd.manifest(&s) = &v
		s.where[sd.key] = fmt.Sprintf("%s:%d", d.file, derefAlias(e.val).Line)
	}
	if e, ok := fields["queues"]; ok {
		if q, ok := d.queueList(e.val, fieldPath(field, "queues")); ok {
			s.Queues = q
			s.where["queues"] = fmt.Sprintf("%s:%d", d.file, e.key.Line)
		}
	}
	return s
}

var (
	handlerNameRE = regexp.MustCompile(`^[a-z0-9._-]+$`)
	envNameRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func (d *manifestDecoder) handler(n *yaml.Node, field string) Handler {
	h := Handler{
		Transport:       TransportStdio,
		Processes:       defaultProcesses,
		Concurrency:     defaultConcurrency,
		SyncConcurrency: defaultSyncConcurrency,
		Env:             map[string]string{},
		StartupTimeout:  defaultStartupTimeout,
		Workdir:         d.dir,
		Line:            derefAlias(n).Line,
	}
	fields, ok := d.mapping(n, field, "name", "command", "attach", "transport", "processes", "concurrency",
		"sync_concurrency", "env", "env_from", "startup_timeout", "max_jobs", "max_memory_mb", "workdir", "jobs")
	if !ok {
		return h
	}
	mapNode := derefAlias(n)

	if e, ok := fields["name"]; !ok {
		d.fail(mapNode, fieldPath(field, "name"), "required")
	} else if name, ok := d.str(e.val, fieldPath(field, "name")); ok {
		switch {
		case name == "":
			d.fail(derefAlias(e.val), fieldPath(field, "name"), "must not be empty")
		case !handlerNameRE.MatchString(name):
			d.fail(derefAlias(e.val), fieldPath(field, "name"), "invalid name %q: use only a-z, 0-9, '.', '_' and '-'", name)
		default:
			h.Name = name
		}
	}

	if e, ok := fields["attach"]; ok {
		d.attachHandler(&h, e, fields, field)
	} else if e, ok := fields["command"]; !ok {
		d.fail(mapNode, fieldPath(field, "command"), "required: the argv to start a handler process, e.g. [python3, -m, app.handlers]")
	} else {
		h.Command = d.command(e.val, fieldPath(field, "command"))
	}

	if e, ok := fields["transport"]; ok {
		if t, ok := d.str(e.val, fieldPath(field, "transport")); ok {
			switch Transport(t) {
			case TransportStdio, TransportUnix:
				h.Transport = Transport(t)
			default:
				d.fail(derefAlias(e.val), fieldPath(field, "transport"), "unknown transport %q (want stdio or unix)", t)
			}
		}
	}

	positive := func(key string, dst *int) {
		if e, ok := fields[key]; ok {
			if v, ok := d.integer(e.val, fieldPath(field, key)); ok {
				if v < 1 {
					d.fail(derefAlias(e.val), fieldPath(field, key), "must be at least 1, got %d", v)
				} else {
					*dst = v
				}
			}
		}
	}
	positive("processes", &h.Processes)
	positive("concurrency", &h.Concurrency)
	if _, given := fields["sync_concurrency"]; given {
		positive("sync_concurrency", &h.SyncConcurrency)
		if e := fields["sync_concurrency"]; h.SyncConcurrency > h.Concurrency {
			d.fail(derefAlias(e.val), fieldPath(field, "sync_concurrency"), "%d exceeds concurrency %d; sync jobs share the process's concurrency",
				h.SyncConcurrency, h.Concurrency)
		}
	} else {
		// A small concurrency caps the default rather than making the
		// handler invalid.
		h.SyncConcurrency = min(defaultSyncConcurrency, h.Concurrency)
	}

	nonNegative := func(key string, dst *int) {
		if e, ok := fields[key]; ok {
			if v, ok := d.integer(e.val, fieldPath(field, key)); ok {
				if v < 0 {
					d.fail(derefAlias(e.val), fieldPath(field, key), "must not be negative, got %d", v)
				} else {
					*dst = v
				}
			}
		}
	}
	nonNegative("max_jobs", &h.MaxJobs)
	nonNegative("max_memory_mb", &h.MaxMemoryMB)

	if e, ok := fields["env_from"]; ok {
		h.EnvFrom = d.envFrom(e.val, fieldPath(field, "env_from"))
	}
	if e, ok := fields["env"]; ok {
		h.Env = d.env(e.val, fieldPath(field, "env"))
	}

	if e, ok := fields["startup_timeout"]; ok {
		if v, ok := d.duration(e.val, fieldPath(field, "startup_timeout")); ok {
			if v == 0 {
				d.fail(derefAlias(e.val), fieldPath(field, "startup_timeout"), "must be greater than zero")
			} else {
				h.StartupTimeout = v
			}
		}
	}

	if e, ok := fields["workdir"]; ok {
		if w, ok := d.str(e.val, fieldPath(field, "workdir")); ok {
			h.Workdir = d.workdir(e.val, fieldPath(field, "workdir"), w)
		}
	}

	if e, ok := fields["jobs"]; !ok {
		d.fail(mapNode, fieldPath(field, "jobs"), "required: declare at least one job")
	} else {
		h.Jobs = d.jobs(e.val, fieldPath(field, "jobs"))
	}
	return h
}

func (d *manifestDecoder) command(n *yaml.Node, field string) []string {
	n = derefAlias(n)
	if n.Kind != yaml.SequenceNode {
		d.fail(n, field, "expected a list (argv), got %s", describeNode(n))
		return nil
	}
	if len(n.Content) == 0 {
		d.fail(n, field, "must not be empty")
		return nil
	}
	argv := make([]string, 0, len(n.Content))
	for i, item := range n.Content {
		a, ok := d.str(item, fieldIndex(field, i))
		if !ok {
			return nil
		}
		argv = append(argv, a)
	}
	if argv[0] == "" {
		d.fail(derefAlias(n.Content[0]), fieldIndex(field, 0), "the program must not be empty")
		return nil
	}
	// Only paths are made absolute; bare names are looked up in PATH.
	if strings.Contains(argv[0], "/") && !filepath.IsAbs(argv[0]) {
		argv[0] = filepath.Join(d.dir, argv[0])
	}
	return argv
}

// envFrom parses env_from: names of the sidecar's own environment variables
// passed through to the handler (secrets injected into the pod, PATH). They
// follow env's naming rules.
func (d *manifestDecoder) envFrom(n *yaml.Node, field string) []string {
	n = derefAlias(n)
	if n.Kind != yaml.SequenceNode {
		d.fail(n, field, "expected a list of environment variable names, got %s", describeNode(n))
		return nil
	}
	var out []string
	for i, item := range n.Content {
		f := fieldIndex(field, i)
		name, ok := d.str(item, f)
		switch {
		case !ok:
		case !envNameRE.MatchString(name):
			d.fail(item, f, "invalid environment variable name %q", name)
		case strings.HasPrefix(name, "SONIQ_"):
			d.fail(item, f, "SONIQ_* variables are the sidecar's own (the database URL must not reach handlers); pass what the handler needs under another name")
		case slices.Contains(out, name):
			d.fail(item, f, "duplicate name %q", name)
		default:
			out = append(out, name)
		}
	}
	return out
}

func (d *manifestDecoder) env(n *yaml.Node, field string) map[string]string {
	out := map[string]string{}
	fields, ok := d.mapping(n, field, anyKey(n)...)
	if !ok {
		return out
	}
	for k, e := range fields {
		f := fieldPath(field, k)
		switch {
		case !envNameRE.MatchString(k):
			d.fail(e.key, f, "invalid environment variable name %q", k)
			continue
		case strings.HasPrefix(k, "SONIQ_"):
			d.fail(e.key, f, "SONIQ_* variables are reserved for the sidecar's protocol variables")
			continue
		}
		if v, ok := d.str(e.val, f); ok {
			out[k] = v
		}
	}
	return out
}

// anyKey lists a mapping's own string keys, so mapping() accepts them all
// while still reporting duplicates and non-string keys.
func anyKey(n *yaml.Node) []string {
	n = derefAlias(n)
	var keys []string
	for i := 0; i+1 < len(n.Content) && n.Kind == yaml.MappingNode; i += 2 {
		keys = append(keys, derefAlias(n.Content[i]).Value)
	}
	return keys
}

func (d *manifestDecoder) workdir(n *yaml.Node, field, w string) string {
	n = derefAlias(n)
	if w == "" {
		d.fail(n, field, "must not be empty (leave it out for the manifest's directory)")
		return d.dir
	}
	if !filepath.IsAbs(w) {
		w = filepath.Join(d.dir, w)
	}
	w = filepath.Clean(w)
	// Checked now so the operator gets file:line, not a spawn error later.
	st, err := os.Stat(w)
	switch {
	case err != nil:
		d.fail(n, field, "%s: %v", w, unwrapPathError(err))
	case !st.IsDir():
		d.fail(n, field, "%s is not a directory", w)
	}
	return w
}

func (d *manifestDecoder) jobs(n *yaml.Node, field string) []JobSpec {
	n = derefAlias(n)
	if n.Kind != yaml.SequenceNode {
		d.fail(n, field, "expected a list of jobs, got %s", describeNode(n))
		return nil
	}
	if len(n.Content) == 0 {
		d.fail(n, field, "empty: declare at least one job")
		return nil
	}
	out := make([]JobSpec, 0, len(n.Content))
	for i, item := range n.Content {
		out = append(out, d.job(item, fieldIndex(field, i)))
	}
	return out
}

func (d *manifestDecoder) job(n *yaml.Node, field string) JobSpec {
	j := JobSpec{Retry: DefaultRetryPolicy(), Line: derefAlias(n).Line}
	fields, ok := d.mapping(n, field, "name", "cancellable", "timeout", "retry")
	if !ok {
		return j
	}
	if e, ok := fields["name"]; !ok {
		d.fail(derefAlias(n), fieldPath(field, "name"), "required")
	} else if name, ok := d.str(e.val, fieldPath(field, "name")); ok {
		switch {
		case name == "":
			d.fail(derefAlias(e.val), fieldPath(field, "name"), "must not be empty")
		case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
			d.fail(derefAlias(e.val), fieldPath(field, "name"), "job name %q must not contain spaces or control characters", name)
		default:
			j.Name = name
			j.Line = derefAlias(e.val).Line
		}
	}
	if e, ok := fields["cancellable"]; !ok {
		d.fail(derefAlias(n), fieldPath(field, "cancellable"),
			"required: declare whether the handler honours cancel (true: async branch, cancelled and NACKed at shutdown; false: sync branch, never interrupted)")
	} else if c, ok := d.boolean(e.val, fieldPath(field, "cancellable")); ok {
		j.Cancellable = c
	}
	if e, ok := fields["timeout"]; ok {
		if t, ok := d.duration(e.val, fieldPath(field, "timeout")); ok {
			j.Timeout, j.TimeoutSet = t, true
		}
	}
	if e, ok := fields["retry"]; ok {
		j.Retry = d.retry(e.val, fieldPath(field, "retry"))
	}
	return j
}

func (d *manifestDecoder) retry(n *yaml.Node, field string) RetryPolicy {
	r := DefaultRetryPolicy()
	fields, ok := d.mapping(n, field, "delay", "backoff", "max_delay", "jitter")
	if !ok {
		return r
	}
	if e, ok := fields["delay"]; ok {
		f := fieldPath(field, "delay")
		if v := derefAlias(e.val); v.Kind == yaml.SequenceNode {
			// Soniq also accepts a list: one delay per attempt, the last
			// repeating.
			var list []time.Duration
			for i, item := range v.Content {
				if dur, ok := d.duration(item, fieldIndex(f, i)); ok {
					list = append(list, dur)
				}
			}
			if len(v.Content) == 0 {
				d.fail(v, f, "empty list: give one delay, or one per attempt")
			}
			r.Delays = list
		} else if dur, ok := d.duration(e.val, f); ok {
			r.Delays = []time.Duration{dur}
		}
	}
	if e, ok := fields["backoff"]; ok {
		if b, ok := d.boolean(e.val, fieldPath(field, "backoff")); ok {
			r.Backoff = b
		}
	}
	if e, ok := fields["max_delay"]; ok {
		if dur, ok := d.duration(e.val, fieldPath(field, "max_delay")); ok {
			r.MaxDelay, r.MaxDelaySet = dur, true
		}
	}
	if e, ok := fields["jitter"]; ok {
		if b, ok := d.boolean(e.val, fieldPath(field, "jitter")); ok {
			r.Jitter = b
		}
	}
	return r
}
