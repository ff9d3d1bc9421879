package config

// The manifest's limits: a job's `limit:` and the top-level `limits:`
// groups (docs/limits.md).

import (
	"fmt"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"

	cfg "github.com/soniq-dev/soniq-sidecar/config"
)

// groupRef is a job's `limit: {group: NAME}`, resolved once every group
// and job is read.
type groupRef struct {
	handler, job int
	node         *yaml.Node // the group's value
	field        string     // the job's limit field path
}

// limitGroups reads the top-level `limits:` list.
func (d *manifestDecoder) limitGroups(n *yaml.Node, field string) []Limit {
	n = derefAlias(n)
	if n.Kind != yaml.SequenceNode {
		d.fail(n, field, "expected a list of limit groups, got %s", describeNode(n))
		return nil
	}
	var out []Limit
	at := map[string]int{} // group -> line
	for i, item := range n.Content {
		f := fieldIndex(field, i)
		fields, ok := d.mapping(item, f, "group", "concurrency", "rate", "key")
		if !ok {
			continue
		}
		e, ok := fields["group"]
		if !ok {
			d.fail(derefAlias(item), fieldPath(f, "group"), "required: the group's name, which jobs name in limit: {group: NAME}")
			continue
		}
		name, ok := d.scopeName(e.val, fieldPath(f, "group"))
		if !ok {
			continue
		}
		l, ok := d.caps(item, fields, f)
		if !ok {
			continue
		}
		if line, dup := at[name]; dup {
			d.fail(derefAlias(e.val), fieldPath(f, "group"), "limit group %q is declared twice (first at line %d)", name, line)
			continue
		}
		l.Scope, l.Group, l.Line = name, true, derefAlias(e.val).Line
		at[name] = l.Line
		out = append(out, l)
	}
	return out
}

// jobLimit reads a job's `limit:`: caps of its own (the scope is the job)
// or a group's name, resolved later (resolveGroups).
func (d *manifestDecoder) jobLimit(n *yaml.Node, field, job string) *Limit {
	fields, ok := d.mapping(n, field, "group", "concurrency", "rate", "key")
	if !ok {
		return nil
	}
	if e, ok := fields["group"]; ok {
		for _, own := range []string{"concurrency", "rate", "key"} {
			if o, has := fields[own]; has {
				d.fail(o.key, fieldPath(field, own), "a job's limit names a group or has caps of its own, not both: set %s on the group %q in limits:, or drop group", own, e.val.Value)
				return nil
			}
		}
		name, ok := d.scopeName(e.val, fieldPath(field, "group"))
		if !ok {
			return nil
		}
		return &Limit{Scope: name, Group: true, Line: derefAlias(e.val).Line}
	}
	l, ok := d.caps(n, fields, field)
	if !ok {
		return nil
	}
	l.Scope, l.Line = job, derefAlias(n).Line
	return &l
}

// caps reads concurrency, rate and key; at least one cap is required.
func (d *manifestDecoder) caps(n *yaml.Node, fields map[string]yamlEntry, field string) (Limit, bool) {
	var l Limit
	before := len(d.errs)
	c, hasC := fields["concurrency"]
	r, hasR := fields["rate"]
	if !hasC && !hasR {
		d.fail(derefAlias(n), field, "a limit needs a cap: concurrency (like 5), rate (like 100/1m), or both")
		return l, false
	}
	if hasC {
		f := fieldPath(field, "concurrency")
		if v, ok := d.integer(c.val, f); ok {
			if v < 1 {
				d.fail(derefAlias(c.val), f, "must be at least 1, got %d (to pause a scope, use soniq-sidecar limit set --concurrency 0)", v)
			} else {
				l.Concurrency = v
			}
		}
	}
	if hasR {
		f := fieldPath(field, "rate")
		if s, ok := d.rateText(r.val, f); ok {
			if rate, err := cfg.ParseRate(s); err != nil {
				d.fail(derefAlias(r.val), f, "%v", err)
			} else {
				l.Rate = &rate
			}
		}
	}
	if e, ok := fields["key"]; ok {
		f := fieldPath(field, "key")
		if s, ok := d.str(e.val, f); ok {
			if path, err := cfg.ParseLimitKey(s); err != nil {
				d.fail(derefAlias(e.val), f, "%v", err)
			} else {
				l.Key = path
			}
		}
	}
	return l, len(d.errs) == before
}

// rateText is a rate's text: "100/1m" is a YAML string.
func (d *manifestDecoder) rateText(n *yaml.Node, field string) (string, bool) {
	n = derefAlias(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() == "!!null" {
		d.fail(n, field, "expected a rate N/DURATION (like 100/1m), got %s", describeNode(n))
		return "", false
	}
	return n.Value, true
}

// scopeName reads a group's name: not empty, no spaces or control
// characters (it is a metric label and a command-line argument).
func (d *manifestDecoder) scopeName(n *yaml.Node, field string) (string, bool) {
	name, ok := d.str(n, field)
	switch {
	case !ok:
		return "", false
	case name == "":
		d.fail(derefAlias(n), field, "must not be empty")
		return "", false
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
		d.fail(derefAlias(n), field, "group name %q must not contain spaces or control characters", name)
		return "", false
	}
	return name, true
}

// resolveGroups gives each job naming a group a copy of the group's caps,
// and refuses an unknown group and a group named like a job that has caps
// of its own (the two scopes would count as one).
func (d *manifestDecoder) resolveGroups(m *Manifest) {
	groups := map[string]*Limit{}
	for i := range m.Limits {
		groups[m.Limits[i].Scope] = &m.Limits[i]
	}
	for _, ref := range d.groupRefs {
		if ref.handler >= len(m.Handlers) || ref.job >= len(m.Handlers[ref.handler].Jobs) {
			continue
		}
		j := &m.Handlers[ref.handler].Jobs[ref.job]
		g, ok := groups[j.Limit.Scope]
		if !ok {
			msg := "unknown limit group %q: declare it in the top-level limits: list"
			if len(groups) > 0 {
				names := make([]string, 0, len(groups))
				for _, l := range m.Limits {
					names = append(names, l.Scope)
				}
				msg += " (declared: " + strings.Join(names, ", ") + ")"
			}
			d.fail(derefAlias(ref.node), fieldPath(ref.field, "group"), msg, j.Limit.Scope)
			j.Limit = nil
			continue
		}
		c := *g
		c.Key = append([]string(nil), g.Key...)
		if g.Rate != nil {
			r := *g.Rate
			c.Rate = &r
		}
		j.Limit = &c
	}
	for _, h := range m.Handlers {
		for _, j := range h.Jobs {
			if j.Limit == nil || j.Limit.Group {
				continue
			}
			if g, ok := groups[j.Name]; ok {
				d.errs = append(d.errs, &ManifestError{File: d.file, Line: g.Line, Field: "limits", Msg: fmt.Sprintf(
					"limit group %q has the name of a job with a limit of its own (line %d): the two scopes would count as one; rename the group", j.Name, j.Limit.Line)})
			}
		}
	}
}

// limitGroupNode is a job's `limit.group` value node, or the job's node.
func limitGroupNode(job *yaml.Node) *yaml.Node {
	job = derefAlias(job)
	for i := 0; i+1 < len(job.Content) && job.Kind == yaml.MappingNode; i += 2 {
		if job.Content[i].Value != "limit" {
			continue
		}
		l := derefAlias(job.Content[i+1])
		for k := 0; k+1 < len(l.Content) && l.Kind == yaml.MappingNode; k += 2 {
			if l.Content[k].Value == "group" {
				return l.Content[k+1]
			}
		}
	}
	return job
}
