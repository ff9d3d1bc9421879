package config

import (
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"
)

// notForAttach names the handler keys that make no sense for a handler the
// sidecar attaches to, with the reason given in the error.
var notForAttach = []struct{ key, why string }{
	{"command", "the sidecar spawns nothing for an attach handler: its processes run in their own container (command and attach are alternatives)"},
	{"env", "the sidecar does not start attached processes, so it sets none of their environment"},
	{"env_from", "the sidecar does not start attached processes, so it passes none of their environment"},
	{"workdir", "the sidecar does not start attached processes"},
	{"processes", "each attach endpoint is one process: list more endpoints (or a glob) instead"},
	{"max_jobs", "recycling does not apply to attached processes: the sidecar never stops or signals them (their container's restart policy does)"},
	{"max_memory_mb", "recycling does not apply to attached processes: the sidecar never stops or signals them (set a memory limit on their container)"},
}

// attachHandler parses `attach:` (one socket path or glob, or a list of
// them) and rejects the keys that only apply to spawned handlers.
func (d *manifestDecoder) attachHandler(h *Handler, e yamlEntry, fields map[string]yamlEntry, field string) {
	af := fieldPath(field, "attach")
	n := derefAlias(e.val)
	var items []*yaml.Node
	switch n.Kind {
	case yaml.ScalarNode:
		items = []*yaml.Node{n}
	case yaml.SequenceNode:
		if len(n.Content) == 0 {
			d.fail(n, af, "must not be empty: list the Unix socket paths (or globs) the handler processes listen on")
		}
		items = n.Content
	default:
		d.fail(n, af, "expected a socket path or a list of them, got %s", describeNode(n))
		return
	}
	for i, item := range items {
		f := af
		if n.Kind == yaml.SequenceNode {
			f = fieldIndex(af, i)
		}
		p, ok := d.str(item, f)
		if !ok {
			continue
		}
		switch {
		case p == "":
			d.fail(derefAlias(item), f, "must not be empty")
			continue
		case strings.HasSuffix(p, "/"):
			d.fail(derefAlias(item), f, "%q names a directory; name the socket file (or a glob such as %s*.sock)", p, p)
			continue
		}
		if _, err := filepath.Match(p, ""); err != nil {
			d.fail(derefAlias(item), f, "bad glob %q: %v", p, err)
			continue
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(d.dir, p)
		}
		if !IsGlob(p) && len(p) >= 108 {
			d.fail(derefAlias(item), f, "socket path %q is %d bytes; a Unix socket path must be shorter than 108", p, len(p))
			continue
		}
		h.Attach = append(h.Attach, p)
	}
	for _, k := range notForAttach {
		if ke, ok := fields[k.key]; ok {
			d.fail(ke.key, fieldPath(field, k.key), "not allowed with attach: %s", k.why)
		}
	}
	if te, ok := fields["transport"]; ok {
		if t, ok := d.str(te.val, fieldPath(field, "transport")); ok && Transport(t) != TransportUnix {
			d.fail(derefAlias(te.val), fieldPath(field, "transport"), "an attach handler speaks the unix transport (got %q); leave transport out", t)
		}
	}
	h.Transport = TransportUnix
	h.Processes = 0
	for _, p := range h.Attach {
		if !IsGlob(p) {
			h.Processes++
		}
	}
}
