package config

// The manifest's schema: what each block may hold, its defaults and its
// rules, decoded with the toolkit of yamlnode.go.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
)

func (d *manifestDecoder) manifest(root *yaml.Node) *Manifest {
	m := &Manifest{}
	fields, ok := d.mapping(root, "", "version", "settings", "queues", "handlers", "schedules", "limits")
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
	if e, ok := fields["schedules"]; ok {
		m.Schedules = d.schedules(e.val, "schedules")
	}
	if e, ok := fields["limits"]; ok {
		m.Limits = d.limitGroups(e.val, "limits")
	}
	defer d.resolveGroups(m)
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
		h := d.handler(item, field, i)
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
	var keys []string
	for _, sd := range settingTable {
		if sd.engine() {
			keys = append(keys, sd.key)
		}
	}
	fields, ok := d.mapping(n, field, keys...)
	if !ok {
		return s
	}
	s.Where = map[string]string{}
	for _, sd := range settingTable {
		e, ok := fields[sd.key]
		if !ok {
			continue
		}
		f := fieldPath(field, sd.key)
		switch {
		case sd.manifest != nil:
			v, ok := d.duration(e.val, f)
			if !ok {
				continue
			}
			if v == 0 && !sd.zeroValid {
				d.fail(derefAlias(e.val), f, "must be greater than zero")
				continue
			}
			*sd.manifest(&s) = &v
		case sd.intManifest != nil:
			v, ok := d.integer(e.val, f)
			if !ok {
				continue
			}
			if err := checkInt(v, sd.zeroValid); err != nil {
				d.fail(derefAlias(e.val), f, "%v, got %d", err, v)
				continue
			}
			*sd.intManifest(&s) = &v
		default:
			continue
		}
		s.Where[sd.key] = fmt.Sprintf("%s:%d", d.file, derefAlias(e.val).Line)
	}
	if e, ok := fields[queuesKey]; ok {
		if q, ok := d.queueList(e.val, fieldPath(field, queuesKey)); ok {
			s.Queues = q
			s.Where[queuesKey] = fmt.Sprintf("%s:%d", d.file, e.key.Line)
		}
	}
	if e, ok := fields[schedulerKey]; ok {
		if v, ok := d.boolean(e.val, fieldPath(field, schedulerKey)); ok {
			s.Scheduler = &v
			s.Where[schedulerKey] = fmt.Sprintf("%s:%d", d.file, e.key.Line)
		}
	}
	return s
}

var (
	handlerNameRE = regexp.MustCompile(`^[a-z0-9._-]+$`)
	envNameRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func (d *manifestDecoder) handler(n *yaml.Node, field string, index int) Handler {
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
		h.Jobs = d.jobs(e.val, fieldPath(field, "jobs"), index)
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

func (d *manifestDecoder) jobs(n *yaml.Node, field string, handler int) []JobSpec {
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
		j := d.job(item, fieldIndex(field, i))
		if j.Limit != nil && j.Limit.Group {
			d.groupRefs = append(d.groupRefs, groupRef{handler: handler, job: i, node: limitGroupNode(item), field: fieldPath(fieldIndex(field, i), "limit")})
		}
		out = append(out, j)
	}
	return out
}

func (d *manifestDecoder) job(n *yaml.Node, field string) JobSpec {
	j := JobSpec{Retry: DefaultRetryPolicy(), Line: derefAlias(n).Line}
	fields, ok := d.mapping(n, field, "name", "cancellable", "timeout", "retry", "limit")
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
	if e, ok := fields["limit"]; ok && j.Name != "" {
		j.Limit = d.jobLimit(e.val, fieldPath(field, "limit"), j.Name)
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

// Handler defaults (docs/manifest.md).
const (
	defaultProcesses       = 1
	defaultConcurrency     = 8
	defaultSyncConcurrency = 4
	defaultStartupTimeout  = 10 * time.Second
)
