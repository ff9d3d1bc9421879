package config

import (
	"encoding/json"
	"strings"
	"unicode"

	"go.yaml.in/yaml/v3"

	cfg "github.com/soniq-dev/soniq-sidecar/config"
	"github.com/soniq-dev/soniq-sidecar/internal/schedule"
)

// Schedule is a manifest's recurring job (the public package's type).
type Schedule = cfg.Schedule

// schedules reads the top-level `schedules:` list: each item
// {name, every | cron, args, queue, priority, max_attempts}.
func (d *manifestDecoder) schedules(n *yaml.Node, field string) []Schedule {
	n = derefAlias(n)
	if n.Kind != yaml.SequenceNode {
		d.fail(n, field, "expected a list of schedules, got %s", describeNode(n))
		return nil
	}
	var out []Schedule
	at := map[string]int{} // name -> line, for duplicate reports
	for i, item := range n.Content {
		f := fieldIndex(field, i)
		s, ok := d.schedule(item, f)
		if !ok {
			continue
		}
		if line, dup := at[s.Name]; dup {
			d.fail(nameNode(item), fieldPath(f, "name"), "schedule %q is declared twice (first at line %d); a job name has one schedule", s.Name, line)
			continue
		}
		at[s.Name] = s.Line
		out = append(out, s)
	}
	return out
}

func (d *manifestDecoder) schedule(n *yaml.Node, field string) (Schedule, bool) {
	s := Schedule{Line: derefAlias(n).Line}
	fields, ok := d.mapping(n, field, "name", "every", "cron", "args", "queue", "priority", "max_attempts")
	if !ok {
		return s, false
	}
	before := len(d.errs)
	mapNode := derefAlias(n)
	if e, ok := fields["name"]; !ok {
		d.fail(mapNode, fieldPath(field, "name"), "required: the job name to enqueue")
	} else if name, ok := d.str(e.val, fieldPath(field, "name")); ok {
		switch {
		case name == "":
			d.fail(derefAlias(e.val), fieldPath(field, "name"), "must not be empty")
		case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0:
			d.fail(derefAlias(e.val), fieldPath(field, "name"), "job name %q must not contain spaces or control characters", name)
		default:
			s.Name = name
			s.Line = derefAlias(e.val).Line
		}
	}
	every, hasEvery := fields["every"]
	cronE, hasCron := fields["cron"]
	switch {
	case hasEvery && hasCron:
		d.fail(cronE.key, fieldPath(field, "cron"), "give either every or cron, not both")
	case !hasEvery && !hasCron:
		d.fail(mapNode, field, "required: every (an interval, like 30s or 1h) or cron (a five-field expression, like \"*/5 * * * *\")")
	case hasEvery:
		f := fieldPath(field, "every")
		if v, ok := d.duration(every.val, f); ok {
			if _, err := schedule.Every(v); err != nil {
				d.fail(derefAlias(every.val), f, "%v", err)
			} else {
				s.Every = v
			}
		}
	default:
		f := fieldPath(field, "cron")
		if expr, ok := d.str(cronE.val, f); ok {
			if _, err := schedule.Cron(expr); err != nil {
				d.fail(derefAlias(cronE.val), f, "%v", err)
			} else {
				s.Cron = strings.TrimSpace(expr)
			}
		}
	}
	if e, ok := fields["args"]; ok {
		s.Args = d.jsonObject(e.val, fieldPath(field, "args"))
	}
	if e, ok := fields["queue"]; ok {
		if q, ok := d.str(e.val, fieldPath(field, "queue")); ok {
			if err := checkQueueName(q); err != nil {
				d.fail(derefAlias(e.val), fieldPath(field, "queue"), "%v", err)
			} else {
				s.Queue = q
			}
		}
	}
	if e, ok := fields["priority"]; ok {
		if v, ok := d.integer(e.val, fieldPath(field, "priority")); ok {
			s.Priority = &v
		}
	}
	if e, ok := fields["max_attempts"]; ok {
		if v, ok := d.integer(e.val, fieldPath(field, "max_attempts")); ok {
			if v < 1 {
				d.fail(derefAlias(e.val), fieldPath(field, "max_attempts"), "must be at least 1, got %d", v)
			} else {
				s.MaxAttempts = &v
			}
		}
	}
	return s, len(d.errs) == before
}

// jsonObject reads a mapping as a JSON object.
func (d *manifestDecoder) jsonObject(n *yaml.Node, field string) json.RawMessage {
	n = derefAlias(n)
	if n.Kind != yaml.MappingNode {
		d.fail(n, field, "expected a mapping (the job's args, a JSON object), got %s", describeNode(n))
		return nil
	}
	var v map[string]any
	if err := n.Decode(&v); err != nil {
		d.fail(n, field, "cannot read the args: %v", err)
		return nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		d.fail(n, field, "the args cannot be written as JSON (keys must be strings): %v", err)
		return nil
	}
	return raw
}

// ScheduleSpec is a manifest schedule's timing, as the scheduler stores it.
func ScheduleSpec(s Schedule) (schedule.Spec, error) {
	if s.Cron != "" {
		return schedule.Cron(s.Cron)
	}
	return schedule.Every(s.Every)
}
