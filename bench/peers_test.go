package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestKeyPathsAcceptsOnlyKnownPeers(t *testing.T) {
	for _, tc := range []struct {
		list    string
		want    map[string]string
		wantErr bool
	}{
		{list: "", want: map[string]string{}},
		{list: "pgqueuer=/v/bin/python, pg-boss=/n", want: map[string]string{"pgqueuer": "/v/bin/python", "pg-boss": "/n"}},
		{list: "celery=/v/bin/python", wantErr: true},
		{list: "pgqueuer", wantErr: true},
		{list: "pgqueuer=", wantErr: true},
	} {
		got, err := keyPaths(tc.list)
		if (err != nil) != tc.wantErr {
			t.Errorf("keyPaths(%q): error %v, want error %v", tc.list, err, tc.wantErr)
			continue
		}
		if tc.wantErr {
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("keyPaths(%q) = %v, want %v", tc.list, got, tc.want)
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("keyPaths(%q)[%s] = %q, want %q", tc.list, k, got[k], v)
			}
		}
	}
}

// A worker's log holds whatever the peer printed, then its tally line.
func TestReadTallyFindsTheResultLine(t *testing.T) {
	for _, tc := range []struct {
		name, log  string
		noop, lats int
		wantErr    bool
	}{
		{name: "tally", log: "BENCH-READY\nsome warning\nBENCH-RESULT {\"noop\": 1208, \"latency_us\": [2100, 3400]}\n", noop: 1208, lats: 2},
		{name: "killed before its tally", log: "BENCH-READY\n", wantErr: true},
		{name: "truncated tally", log: "BENCH-RESULT {\"noop\": 12", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "worker.log")
			if err := os.WriteFile(path, []byte(tc.log), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := readTally(path)
			if (err != nil) != tc.wantErr {
				t.Fatalf("readTally: error %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && (got.Noop != tc.noop || len(got.LatencyUS) != tc.lats) {
				t.Fatalf("readTally = %+v, want %d no-op jobs and %d latencies", got, tc.noop, tc.lats)
			}
		})
	}
}

// A result_ttl 0 row's latencies come from the handlers' stderr lines as
// the sidecar logs them, among its other log lines.
func TestStderrLatenciesReadsTheSidecarLog(t *testing.T) {
	log := `{"level":"INFO","msg":"handler process ready","handler":"bench-node","pid":7}
{"level":"INFO","msg":"BENCH-LATENCY 1000000 1002500","handler":"bench-node","pid":7,"stream":"stderr"}
{"level":"INFO","msg":"soniq-handler[8]: BENCH-LATENCY 2000000 2001250","handler":"bench-python","pid":8,"stream":"stderr"}
`
	path := filepath.Join(t.TempDir(), "sidecar.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := stderrLatencies(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != 2.5 || got[1] != 1.25 {
		t.Fatalf("stderrLatencies = %v, want [2.5 1.25]", got)
	}
}

// The ttl0 rows keep the stdio rows' handlers and differ in the manifest.
func TestTTL0VariantWritesResultTTL0(t *testing.T) {
	b := &bench{c: &config{work: t.TempDir(), procs: 2, conc: 64, python: "python3", node: "node"}}
	for _, sdk := range []string{"python", "node"} {
		v := ttl0Variant(sdk)
		if v.Key != sdk+"-stdio-ttl0" || v.Transport != "stdio" {
			t.Fatalf("ttl0Variant(%s) = %+v", sdk, v)
		}
		path, err := b.writeManifest(v, "t-"+sdk)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"settings:\n  result_ttl: 0s\n", "BENCH_LATENCY_STDERR: \"1\""} {
			if !strings.Contains(string(raw), want) {
				t.Errorf("%s manifest lacks %q:\n%s", sdk, want, raw)
			}
		}
	}
	plain, err := b.writeManifest(sidecarVariant("node", "stdio"), "t-plain")
	if err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(plain); strings.Contains(string(raw), "result_ttl") || strings.Contains(string(raw), "BENCH_LATENCY_STDERR") {
		t.Errorf("the stdio row's manifest changed:\n%s", raw)
	}
}
