package main

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"syscall"
	"time"

	"github.com/soniq-dev/soniq-sidecar/internal/proc"
)

// CPU contention: busy processes beside the cluster for a few seconds, as a
// noisy neighbour on a shared machine would run. Races between a sidecar's
// goroutines, its handlers and Postgres hide on a quiet machine; stealing
// the cores for a while stretches every window between two statements, two
// events or two processes, so the timing a quiet run never tries is tried.

// faultCPUHog is the contention fault. It is drawn apart from the other
// kinds (from its own random stream), so adding it left every seed's
// schedule of the other faults as it was.
const faultCPUHog = "cpu-hog"

// CPUParams shape the contention schedule; Busy 0 turns it off.
type CPUParams struct {
	Busy           int           // most busy processes at once (each wants a whole core)
	GapMin, GapMax time.Duration // between two hogs
	LenMin, LenMax time.Duration // how long one lasts
}

// PlanCPU draws the contention steps of a run of length from the seed.
func PlanCPU(seed int64, length time.Duration, p CPUParams) []Step {
	if p.Busy <= 0 {
		return nil
	}
	rnd := rand.New(rand.NewSource(seed ^ 0x0c9_0b05e))
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
		if at >= length {
			return steps
		}
		steps = append(steps, Step{At: at, Kind: faultCPUHog, Target: "cpu", Dur: between(p.LenMin, p.LenMax), Pick: 1 + rnd.Intn(p.Busy)})
	}
}

// mergeSteps returns both schedules in one, by offset.
func mergeSteps(a, b []Step) []Step {
	out := append(append([]Step(nil), a...), b...)
	sort.SliceStable(out, func(i, k int) bool { return out[i].At < out[k].At })
	return out
}

// hogCPU runs st.Pick busy processes for st.Dur, then kills them.
func (c *cluster) hogCPU(ctx context.Context, st Step) {
	at := time.Now()
	var procs []*proc.Proc
	for range st.Pick {
		// A shell's empty loop: all user time, no memory, no I/O. In the
		// run's process group, so it dies with the run whatever happens.
		p, err := c.group.Start([]string{"sh", "-c", "while :; do :; done"}, nil, c.cfg.work, os.DevNull)
		if err != nil {
			c.rec.problem("cpu hog: start a busy process: %v", err)
			break
		}
		procs = append(procs, p)
	}
	sleep(ctx, st.Dur)
	for _, p := range procs {
		_ = p.Signal(syscall.SIGKILL)
		p.Wait(5 * time.Second)
	}
	c.rec.fault(Fault{At: at, Kind: faultCPUHog, Target: "cpu", Dur: time.Since(at), Detail: fmt.Sprintf("%d busy processes", len(procs))})
}
