package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/soniq-dev/soniq-sidecar/internal/proc"
)

// Attach rows: the handler processes run on their own (as the worker
// container of a pod would), each serving a socket with --listen, and the
// sidecar attaches to them (`attach:` in the manifest). Their rows sit next
// to the same SDK's stdio and unix (spawned, one Session stream per process)
// rows, with the ratio to stdio measured in the same rounds.

func attachVariant(sdk string) variant { return sidecarVariant(sdk, "attach") }

// sockets are the endpoints of an attach variant's handler processes.
func (b *bench) sockets(tag string) []string {
	var out []string
	for i := range b.c.procs {
		out = append(out, filepath.Join(b.c.work, fmt.Sprintf("%s-%d.sock", tag, i)))
	}
	return out
}

// handlerCommand is the SDK's bench handler and its environment.
func (b *bench) handlerCommand(sdk string) ([]string, []string, error) {
	c := b.c
	per := fmt.Sprint(c.conc / c.procs)
	switch sdk {
	case "python":
		return []string{c.python, filepath.Join(c.root, "bench", "handlers", "py_handler.py")},
			[]string{"PYTHONPATH", filepath.Join(c.root, "sdk", "python"), "PYTHONUNBUFFERED", "1", "BENCH_CONCURRENCY", per}, nil
	case "node":
		return []string{c.node, filepath.Join(c.root, "bench", "handlers", "node_handler.js")},
			[]string{"BENCH_NODE_SDK", filepath.Join(c.root, "sdk", "node", "index.js"), "BENCH_CONCURRENCY", per}, nil
	}
	return nil, nil, fmt.Errorf("unknown sdk %q", sdk)
}

// writeAttachManifest is writeManifest for an attach variant.
func (b *bench) writeAttachManifest(v variant, tag string) (string, error) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "version: 1\nhandlers:\n  - name: bench-%s\n    attach:\n", v.SDK)
	for _, s := range b.sockets(tag) {
		fmt.Fprintf(&sb, "      - %q\n", s)
	}
	fmt.Fprintf(&sb, "    concurrency: %d\n    sync_concurrency: 1\n    startup_timeout: 30s\n    jobs:\n", b.c.conc/b.c.procs)
	for _, j := range []string{"bench.noop", "bench.latency", "bench.sleep"} {
		fmt.Fprintf(&sb, "      - {name: %s, cancellable: true}\n", j)
	}
	path := filepath.Join(b.c.work, "manifest-"+tag+".yaml")
	return path, os.WriteFile(path, []byte(sb.String()), 0o644)
}

// startHandlers starts an attach variant's handler processes and waits
// until each listens.
func (b *bench) startHandlers(ctx context.Context, v variant, tag string, readyIn time.Duration) ([]*proc.Proc, error) {
	argv, kv, err := b.handlerCommand(v.SDK)
	if err != nil {
		return nil, err
	}
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for i := 0; i < len(kv); i += 2 {
		env = append(env, kv[i]+"="+kv[i+1])
	}
	var hs []*proc.Proc
	fail := func(err error) ([]*proc.Proc, error) {
		for _, h := range hs {
			_ = h.Stop(5 * time.Second)
		}
		return nil, err
	}
	for i, sock := range b.sockets(tag) {
		_ = os.Remove(sock)
		h, err := b.c.group.Start(append(append([]string{}, argv...), "--listen", sock), env, b.c.work, filepath.Join(b.c.work, fmt.Sprintf("%s-handler-%d.log", tag, i)))
		if err != nil {
			return fail(err)
		}
		hs = append(hs, h)
	}
	for _, h := range hs {
		if err := proc.WaitLog(ctx, h, "listening on", 1, readyIn); err != nil {
			return fail(err)
		}
	}
	return hs, nil
}

// writeTransportRatios adds the streaming and attach rows' ratio to the
// same SDK's stdio throughput, measured in the same rounds.
func (r *report) writeTransportRatios(w func(string, ...any)) {
	var rows []string
	for _, sdk := range []string{"python", "node"} {
		stdio := r.tp(sdk + "-stdio")
		if !ok(stdio.Median) {
			continue
		}
		for _, tr := range []string{"unix", "attach"} {
			t := r.tp(sdk + "-" + tr)
			if t.Status != "" || !ok(t.Median) {
				continue
			}
			rows = append(rows, fmt.Sprintf("| %s | %s | %s | **%.0f %%** |", t.Label, f0(t.Median), f0(stdio.Median), 100*t.Median/stdio.Median))
		}
	}
	if len(rows) == 0 {
		return
	}
	w("### Unix transport and attach mode against stdio\n\n")
	w("One Session stream per handler process, spawned (`transport: unix`) or attached (`attach:`, the handlers started on their own with `--listen`); the goal is at least 90 %% of the same SDK's stdio throughput.\n\n")
	w("| variant | jobs/s | same SDK over stdio | ratio |\n| --- | --- | --- | --- |\n")
	for _, row := range rows {
		w("%s\n", row)
	}
	w("\n")
}
