package config

// The YAML node toolkit of the manifest decoder: mappings with "did you
// mean" for unknown keys, typed scalars, durations and queue lists, every
// error located by file, line and field path.

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"
)

// manifestDecoder walks the YAML node tree, collecting every error with its
// line and field path rather than stopping at the first.
type manifestDecoder struct {
	file string
	dir  string
	errs []error
	// groupRefs are the jobs naming a limit group (limits.go).
	groupRefs []groupRef
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
	v, err := ParseDuration(n.Value)
	if err != nil {
		d.fail(n, field, "%v", err)
		return 0, false
	}
	return v, true
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
