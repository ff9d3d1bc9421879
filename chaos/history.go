package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The history of a run: what the producer enqueued, every execution the
// handlers recorded, every fault the nemesis injected, every sidecar process
// and what its log says, the rows at the end, the memory samples. The checker
// reads nothing else.

// Fault kinds.
const (
	faultSidecarKill   = "sidecar-kill"   // SIGKILL a sidecar, start it again
	faultSidecarStop   = "sidecar-stop"   // SIGSTOP a sidecar, SIGCONT it later
	faultSidecarTerm   = "sidecar-term"   // SIGTERM a sidecar (graceful), start it again
	faultHandlerKill   = "handler-kill"   // SIGKILL one handler process
	faultPGRestart     = "pg-restart"     // stop Postgres (fast or immediate), start it again
	faultPgBouncerKill = "pgbouncer-kill" // SIGKILL PgBouncer, start it again
)

// faultKinds lists every kind, in the order of the summary.
func faultKinds() []string {
	return []string{faultSidecarKill, faultSidecarStop, faultSidecarTerm, faultHandlerKill, faultPGRestart, faultPgBouncerKill}
}

// Job names: the chaos.fail_* jobs always fail (they must end dead-lettered),
// the *_sync ones are non-cancellable (never interrupted but by SIGKILL).
const (
	jobAsync     = "chaos.async"
	jobSync      = "chaos.sync"
	jobFailAsync = "chaos.fail_async"
	jobFailSync  = "chaos.fail_sync"
)

func designedToFail(name string) bool { return name == jobFailAsync || name == jobFailSync }
func nonCancellable(name string) bool { return name == jobSync || name == jobFailSync }

// Execution is one run of a job in a handler process.
type Execution struct {
	Token      string    `json:"token"`
	JobID      string    `json:"job_id"`
	Attempt    int       `json:"attempt"`
	Sidecar    string    `json:"sidecar"` // which sidecar's handler: py, node, attach
	PID        int       `json:"pid"`     // the handler process
	PPID       int       `json:"ppid"`    // its parent: the sidecar, for spawned handlers
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`     // zero: it never ended (its process died)
	Outcome    string    `json:"outcome"` // ok, fail, cancelled, or "" (no end)
	SidecarPID int       `json:"sidecar_pid"`
}

// Fault is one thing the nemesis did.
type Fault struct {
	At     time.Time     `json:"at"`
	Kind   string        `json:"kind"`
	Target string        `json:"target"` // py, node, attach, postgres, pgbouncer
	PID    int           `json:"pid,omitempty"`
	Dur    time.Duration `json:"dur,omitempty"` // a stop's length, Postgres's downtime
	Detail string        `json:"detail,omitempty"`
}

func (f Fault) String() string {
	s := fmt.Sprintf("%s %s %s", f.At.Format("15:04:05.000"), f.Kind, f.Target)
	if f.PID != 0 {
		s += fmt.Sprintf(" pid=%d", f.PID)
	}
	if f.Dur > 0 {
		s += fmt.Sprintf(" for=%s", f.Dur.Round(time.Millisecond))
	}
	if f.Detail != "" {
		s += " (" + f.Detail + ")"
	}
	return s
}

// Incarnation is one process of a sidecar, from start to exit.
type Incarnation struct {
	Sidecar  string    `json:"sidecar"`
	PID      int       `json:"pid"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	ExitCode int       `json:"exit_code"`
	Log      string    `json:"log"`
	TermAt   time.Time `json:"term_at"` // when it was sent SIGTERM (zero: never)
	DBPath   string    `json:"db_path"` // how it reaches Postgres: direct or pgbouncer
	// From its log: job ids it NACKed at shutdown, panic lines, when it
	// found that its worker row had been recovered by another sidecar.
	Nacks   map[string]bool `json:"-"`
	Panics  []string        `json:"-"`
	RowLost []time.Time     `json:"-"`
	// Orphans: job ids its self-audit gave back (held under its worker
	// row, run by nobody).
	Orphans []string `json:"-"`
}

// Outage is a time Postgres could not be reached by one path (direct, or
// through PgBouncer), as the driver's own probe saw it: from its first
// failed connection to its next successful one.
type Outage struct {
	Path     string
	From, To time.Time
}

// Job is a job the producer enqueued and the row it ended as.
type Job struct {
	ID          string
	Name        string
	Enqueued    time.Time // the row's created_at
	Status      string    // done, dead_letter, queued, processing, cancelled, or missing
	Attempts    int
	MaxAttempts int
	Finished    time.Time // updated_at of a done row, moved_to_dead_letter_at
	Reason      string    // dead_letter_reason
	LastError   string
}

// RSSSample is one reading of a sidecar's VmRSS.
type RSSSample struct {
	Sidecar string
	PID     int
	At      time.Time
	KB      int
}

// History is everything the checker looks at.
type History struct {
	Seed         int64
	Length       time.Duration
	Jobs         []Job
	Executions   []Execution
	Faults       []Fault
	Incarnations []Incarnation
	RSS          []RSSSample
	// Limits are the counts of the limited scopes' processing rows by
	// key, every 100 ms (limits.go).
	Limits  []LimitSample
	Outages []Outage
	// Beats are the times each sidecar process (by pid) wrote its
	// last_heartbeat, as the rows say: registration, heartbeats and
	// claims that landed (beats.go), in time order. Stale-worker recovery
	// reads nothing else.
	Beats   map[int][]time.Time
	Cancels []Cancel // the cancel fault's commands (cancel.go)
	// Holders describes who held each row still processing at the end of
	// the drain, by job id (read before the sidecars were stopped).
	Holders map[string]string
	// Problems the harness saw itself: a sidecar that did not exit after
	// SIGTERM, exited with an error, exited on its own, did not become ready.
	Problems []string
}

// readExecutions parses the handlers' history files: start lines, then end
// lines matched by token.
func readExecutions(paths []string) ([]Execution, error) {
	byToken := map[string]*Execution{}
	var order []string
	for _, path := range paths {
		f, err := os.Open(path)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("history: %w", err)
		}
		sc := bufio.NewScanner(f)
		n := 0
		for sc.Scan() {
			n++
			fl := strings.Fields(sc.Text())
			if len(fl) < 8 {
				f.Close()
				return nil, fmt.Errorf("history %s:%d: short line %q", path, n, sc.Text())
			}
			attempt, err1 := strconv.Atoi(fl[3])
			pid, err2 := strconv.Atoi(fl[5])
			ppid, err3 := strconv.Atoi(fl[6])
			us, err4 := strconv.ParseInt(fl[7], 10, 64)
			if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
				f.Close()
				return nil, fmt.Errorf("history %s:%d: bad line %q", path, n, sc.Text())
			}
			at := time.UnixMicro(us)
			switch fl[0] {
			case "start":
				if _, dup := byToken[fl[1]]; dup {
					f.Close()
					return nil, fmt.Errorf("history %s:%d: token %s started twice", path, n, fl[1])
				}
				byToken[fl[1]] = &Execution{Token: fl[1], JobID: fl[2], Attempt: attempt, Sidecar: fl[4], PID: pid, PPID: ppid, Start: at}
				order = append(order, fl[1])
			case "end":
				e, ok := byToken[fl[1]]
				if !ok || len(fl) < 9 {
					f.Close()
					return nil, fmt.Errorf("history %s:%d: end without its start %q", path, n, sc.Text())
				}
				e.End, e.Outcome = at, fl[8]
			default:
				f.Close()
				return nil, fmt.Errorf("history %s:%d: unknown event %q", path, n, fl[0])
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("history %s: %w", path, err)
		}
	}
	out := make([]Execution, 0, len(order))
	for _, t := range order {
		out = append(out, *byToken[t])
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out, nil
}

// attribute sets each execution's SidecarPID: the parent of a spawned
// handler; for an attached handler, the sidecar process that was running
// (or had last started) when the execution started.
func attribute(execs []Execution, incs []Incarnation) {
	byName := map[string][]Incarnation{}
	for _, in := range incs {
		byName[in.Sidecar] = append(byName[in.Sidecar], in)
	}
	for i := range execs {
		e := &execs[i]
		list := byName[e.Sidecar]
		for _, in := range list {
			if in.PID == e.PPID {
				e.SidecarPID = in.PID
				break
			}
		}
		if e.SidecarPID != 0 {
			continue
		}
		for _, in := range list { // started in order
			if !in.Start.After(e.Start) {
				e.SidecarPID = in.PID
			}
		}
	}
}

// scanSidecarLog reads what the checker needs from one incarnation's log:
// the job ids it NACKed at shutdown, any panic, lost worker rows.
func scanSidecarLog(in *Incarnation) error {
	in.Nacks = map[string]bool{}
	f, err := os.Open(in.Log)
	if err != nil {
		return fmt.Errorf("sidecar log: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if isPanicLine(line) || strings.Contains(line, "a sidecar bug") {
			in.Panics = append(in.Panics, line)
			continue
		}
		if !strings.Contains(line, `"shutdown_nack"`) && !strings.Contains(line, "worker row was lost") && !strings.Contains(line, "self-audit: released") {
			continue
		}
		var m struct {
			Time  time.Time `json:"time"`
			Msg   string    `json:"msg"`
			JobID string    `json:"job_id"`
		}
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		switch {
		case m.Msg == "shutdown_nack":
			in.Nacks[m.JobID] = true
		case strings.Contains(m.Msg, "worker row was lost"):
			in.RowLost = append(in.RowLost, m.Time)
		case strings.HasPrefix(m.Msg, "self-audit: released"):
			in.Orphans = append(in.Orphans, m.JobID)
		}
	}
	return sc.Err()
}

// isPanicLine: what the Go runtime writes when a program panics or dies of
// a fatal error (or a race, on a -race build). The sidecar's own "a sidecar
// bug" lines (an impossible state transition it refused) count the same.
func isPanicLine(line string) bool {
	return strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") ||
		strings.HasPrefix(line, "WARNING: DATA RACE") || strings.HasPrefix(line, "SIGSEGV") ||
		strings.HasPrefix(line, "runtime: ")
}

// logLinesAbout returns the lines of a log that mention id.
func logLinesAbout(path, id string, max int) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() && len(out) < max {
		if strings.Contains(sc.Text(), id) {
			out = append(out, sc.Text())
		}
	}
	return out
}
