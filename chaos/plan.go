package main

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"time"
)

// The fault schedule is drawn from the seed before the run starts, so the
// same seed gives the same faults, targets and durations in the same order
// at the same offsets (each fault on a target waits for the previous one
// on that target to heal, so a slow restart can shift a later one a little).

// Step is one planned fault.
type Step struct {
	At     time.Duration // offset from the start of the run
	Kind   string
	Target string        // py, node, attach, postgres, pgbouncer
	Dur    time.Duration // sidecar-stop: the stop; pg-restart: the downtime; kills and SIGTERM: the wait before the restart
	Mode   string        // pg-restart: fast or immediate
	Pick   int           // handler-kill: which handler process (an index into the sidecar's children, sorted by pid)
}

func (s Step) String() string {
	out := fmt.Sprintf("+%6.2fs %-14s %-9s", s.At.Seconds(), s.Kind, s.Target)
	switch s.Kind {
	case faultSidecarStop:
		out += fmt.Sprintf(" stop %s", s.Dur.Round(time.Millisecond))
	case faultPGRestart:
		out += fmt.Sprintf(" %s, down %s", s.Mode, s.Dur.Round(time.Millisecond))
	case faultHandlerKill:
		out += fmt.Sprintf(" draw %d picks the process, restart (attach) after %s", s.Pick, s.Dur.Round(time.Millisecond))
	case faultCPUHog:
		out += fmt.Sprintf(" %d busy processes for %s", s.Pick, s.Dur.Round(time.Millisecond))
	case faultNetPartition, faultDBReadOnly:
		out += fmt.Sprintf(" for %s", s.Dur.Round(time.Millisecond))
	case faultNetLatency:
		out += fmt.Sprintf(" %d ms each way for %s", s.Pick, s.Dur.Round(time.Millisecond))
	case faultNetResets:
		out += fmt.Sprintf(" every %d ms for %s", s.Pick, s.Dur.Round(time.Millisecond))
	default:
		out += fmt.Sprintf(" restart after %s", s.Dur.Round(time.Millisecond))
	}
	return out
}

// PlanParams shape the schedule.
type PlanParams struct {
	Length           time.Duration // faults are drawn for offsets below it
	GapMin, GapMax   time.Duration // between two faults
	StopMin, StopMax time.Duration // SIGSTOP lengths
	PGDownMax        time.Duration // Postgres stays down 0 to this long
	Kinds            []string      // the fault kinds to draw from (each equally likely)
}

// sidecarNames are the three sidecars of a run.
func sidecarNames() []string { return []string{"py", "node", "attach"} }

// Plan draws the fault schedule of a run from its seed (math/rand).
func Plan(seed int64, p PlanParams) []Step {
	rnd := rand.New(rand.NewSource(seed))
	between := func(lo, hi time.Duration) time.Duration {
		if hi <= lo {
			return lo
		}
		return lo + time.Duration(rnd.Int63n(int64(hi-lo)))
	}
	var steps []Step
	at := time.Duration(0)
	for {
		at += between(p.GapMin, p.GapMax)
		if at >= p.Length {
			return steps
		}
		s := Step{At: at, Kind: p.Kinds[rnd.Intn(len(p.Kinds))]}
		// Every draw is made for every step, whatever its kind, so that a
		// step's kind alone does not shift the draws of the next ones.
		target := sidecarNames()[rnd.Intn(3)]
		stop := between(p.StopMin, p.StopMax)
		restart := between(0, time.Second)
		down := between(0, p.PGDownMax)
		immediate := rnd.Intn(2) == 0
		pick := rnd.Intn(1 << 16)
		switch s.Kind {
		case faultSidecarKill, faultSidecarTerm:
			s.Target, s.Dur = target, restart
		case faultSidecarStop:
			s.Target, s.Dur = target, stop
		case faultHandlerKill:
			s.Target, s.Dur, s.Pick = target, restart, pick
		case faultPGRestart:
			s.Target, s.Dur, s.Mode = "postgres", down, "fast"
			if immediate {
				s.Mode = "immediate"
			}
		case faultPgBouncerKill:
			s.Target, s.Dur = "pgbouncer", restart
		}
		steps = append(steps, s)
	}
}

// parseKinds reads a comma-separated list of fault kinds ("" or "all": every kind).
func parseKinds(list string) ([]string, error) {
	if list == "" || list == "all" {
		return faultKinds(), nil
	}
	var out []string
	for _, k := range strings.Split(list, ",") {
		k = strings.TrimSpace(k)
		if !slices.Contains(faultKinds(), k) {
			return nil, fmt.Errorf("unknown fault kind %q (want some of %s)", k, strings.Join(faultKinds(), ","))
		}
		out = append(out, k)
	}
	return out, nil
}
