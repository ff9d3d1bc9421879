package main

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"
)

type config struct {
	root       string
	work       string
	sidecarBin string
	python     string
	node       string
	keep       bool

	seconds time.Duration
	seed    int64
	rate    float64
	plan    PlanParams
	cpu     CPUParams
	reserve ReserveParams
	net     NetParams
	// cancelGap is the longest time between two cancels (cancel.go); 0: none.
	cancelGap time.Duration
	drain     time.Duration

	hbInterval      time.Duration
	hbTimeout       time.Duration
	shutdownTimeout time.Duration
	rules           Rules
}

// envDefault returns $name, or def when it is unset or empty.
func envDefault(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// parseDur reads a Go duration ("90s") or a number of seconds ("90").
func parseDur(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("invalid duration %q (want 90s, 1m30s or a number of seconds)", s)
	}
	return time.Duration(f * float64(time.Second)), nil
}

func parseConfig(args []string) (*config, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	c := &config{}
	durs := map[string]*string{}
	dur := func(name, env, def, usage string) {
		durs[name] = fs.String(name, envDefault(env, def), usage+" ($"+env+")")
	}
	dur("seconds", "CHAOS_SECONDS", "240", "how long faults are injected and jobs enqueued")
	seed := fs.String("seed", os.Getenv("CHAOS_SEED"), "the seed of the fault schedule and the job mix; random when empty, always printed ($CHAOS_SEED)")
	rate := fs.Float64("rate", 20, "jobs enqueued per second")
	dur("gap-min", "CHAOS_GAP_MIN", "2s", "shortest time between two faults")
	dur("gap-max", "CHAOS_GAP_MAX", "6s", "longest time between two faults")
	dur("stop-min", "CHAOS_STOP_MIN", "1s", "shortest SIGSTOP")
	dur("stop-max", "CHAOS_STOP_MAX", "12s", "longest SIGSTOP (above heartbeat-timeout minus two heartbeats, another sidecar may recover the stopped one's rows)")
	dur("pg-down-max", "CHAOS_PG_DOWN_MAX", "2s", "longest time Postgres stays down in a restart")
	kinds := fs.String("faults", envDefault("CHAOS_FAULTS", "all"), "comma-separated fault kinds to inject: "+strings.Join(faultKinds(), ",")+" ($CHAOS_FAULTS)")
	reserveOff := fs.Bool("no-reserve-faults", envDefault("CHAOS_RESERVE_FAULTS", "on") == "off", "turn off the faults aimed at claim-ahead: a sidecar SIGKILLed or sent SIGTERM while its reserve is full ($CHAOS_RESERVE_FAULTS=off)")
	cpuBusy := fs.String("cpu-busy", envDefault("CHAOS_CPU_BUSY", strconv.Itoa(runtime.NumCPU())), "CPU contention: at most this many busy processes at once, a few seconds at a time, beside the other faults; 0 turns it off ($CHAOS_CPU_BUSY)")
	dur("cancel-gap", "CHAOS_CANCEL_GAP", "4s", "the cancel fault: soniq-sidecar cancel on a random queued or running job, at most this long apart (half as long at least); 0 turns it off")
	netOn := fs.Bool("net", envDefault("CHAOS_NET", "on") != "off", "network faults between each sidecar and its database (partitions, latency, reset storms, a read-only window), beside the other faults; CHAOS_NET=off turns them off ($CHAOS_NET)")
	dur("drain", "CHAOS_DRAIN", "120s", "how long the queue may take to drain once the faults stop")
	dur("job-bound", "CHAOS_JOB_BOUND", "120s", "the longest a job may take from its enqueue to done or dead-lettered")
	dur("heartbeat-interval", "CHAOS_HEARTBEAT_INTERVAL", "1s", "the sidecars' heartbeat_interval")
	dur("heartbeat-timeout", "CHAOS_HEARTBEAT_TIMEOUT", "8s", "the sidecars' heartbeat_timeout (stale-worker recovery)")
	dur("shutdown-timeout", "CHAOS_SHUTDOWN_TIMEOUT", "250ms", "the sidecars' shutdown_timeout (short: SIGTERM NACKs some async jobs)")
	fs.StringVar(&c.root, "root", ".", "the repository's root")
	fs.StringVar(&c.sidecarBin, "sidecar", envDefault("CHAOS_SIDECAR", "bin/soniq-sidecar"), "the binary under test (make build) ($CHAOS_SIDECAR)")
	fs.StringVar(&c.work, "dir", os.Getenv("CHAOS_DIR"), "working directory for logs and history (default: a new temporary one) ($CHAOS_DIR)")
	fs.BoolVar(&c.keep, "keep", os.Getenv("CHAOS_KEEP") != "", "keep the working directory after a passing run ($CHAOS_KEEP)")
	fs.IntVar(&c.rules.RSSMaxKB, "rss-max-kb", 256<<10, "no sidecar's VmRSS may exceed this")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	parsed := map[string]time.Duration{}
	for name, v := range durs {
		d, err := parseDur(*v)
		if err != nil {
			return nil, fmt.Errorf("-%s: %w", name, err)
		}
		parsed[name] = d
	}
	c.seconds, c.drain, c.cancelGap = parsed["seconds"], parsed["drain"], parsed["cancel-gap"]
	c.hbInterval, c.hbTimeout, c.shutdownTimeout = parsed["heartbeat-interval"], parsed["heartbeat-timeout"], parsed["shutdown-timeout"]
	if *seed == "" {
		var b [8]byte
		_, _ = crand.Read(b[:])
		c.seed = int64(binary.LittleEndian.Uint64(b[:]) >> 1 % 1_000_000_000)
	} else {
		n, err := strconv.ParseInt(*seed, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("-seed %q: want an integer", *seed)
		}
		c.seed = n
	}
	if *rate <= 0 {
		return nil, errors.New("-rate must be positive")
	}
	c.rate = *rate
	k, err := parseKinds(*kinds)
	if err != nil {
		return nil, err
	}
	c.plan = PlanParams{Length: c.seconds, GapMin: parsed["gap-min"], GapMax: parsed["gap-max"],
		StopMin: parsed["stop-min"], StopMax: parsed["stop-max"], PGDownMax: parsed["pg-down-max"], Kinds: k}
	if c.plan.GapMin <= 0 || c.plan.GapMax < c.plan.GapMin || c.plan.StopMax < c.plan.StopMin {
		return nil, errors.New("want 0 < gap-min <= gap-max and stop-min <= stop-max")
	}
	busy, err := strconv.Atoi(*cpuBusy)
	if err != nil || busy < 0 {
		return nil, fmt.Errorf("-cpu-busy %q: want a whole number of processes, 0 or more", *cpuBusy)
	}
	c.reserve = ReserveParams{Off: *reserveOff, GapMin: 20 * time.Second, GapMax: 60 * time.Second}
	c.cpu = CPUParams{Busy: busy, GapMin: 4 * time.Second, GapMax: 16 * time.Second, LenMin: 2 * time.Second, LenMax: 8 * time.Second}
	if c.hbTimeout < 2*c.hbInterval {
		return nil, errors.New("heartbeat-timeout must be at least two heartbeat intervals")
	}
	// Partitions from well below to well above the heartbeat timeout; a
	// read-only window below the point where recovery may begin.
	c.net = NetParams{Off: !*netOn, GapMin: 6 * time.Second, GapMax: 20 * time.Second,
		PartMin: time.Second, PartMax: 2 * c.hbTimeout, ReadOnlyMax: max(c.hbTimeout-2*c.hbInterval, 2*time.Second)}
	c.rules.HeartbeatInterval, c.rules.HeartbeatTimeout = c.hbInterval, c.hbTimeout
	c.rules.WriteWindow, c.rules.Slack = 5*time.Second, time.Second
	c.rules.JobBound = parsed["job-bound"]
	c.rules.RSSWarmup, c.rules.RSSMinSpan = 20*time.Second, 60*time.Second
	c.rules.RSSGrowthPct, c.rules.RSSGrowthKB = 25, 8<<10
	c.rules.LimitCaps = map[string]int{jobSync: limitCap}
	return c, nil
}

func (c *config) resolve() error {
	var err error
	if c.root, err = filepath.Abs(c.root); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(c.root, ".ci", "pg.sh")); err != nil {
		return fmt.Errorf("-root %s is not the repository's root: %w", c.root, err)
	}
	if !filepath.IsAbs(c.sidecarBin) {
		c.sidecarBin = filepath.Join(c.root, c.sidecarBin)
	}
	if _, err := os.Stat(c.sidecarBin); err != nil {
		return fmt.Errorf("the sidecar binary (run make build first): %w", err)
	}
	// The interpreters the handlers run on: found in PATH (make chaos puts
	// the project's virtualenv first), started by their full path.
	if c.python, err = exec.LookPath("python3"); err != nil {
		return fmt.Errorf("python3: %w", err)
	}
	if c.node, err = exec.LookPath("node"); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if c.work == "" {
		if c.work, err = os.MkdirTemp("", "soniq-chaos-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(c.work, 0o755); err != nil {
		return err
	}
	// Postgres and PgBouncer run as another user when we are root.
	return os.Chmod(c.work, 0o755)
}
