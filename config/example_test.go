package config_test

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/soniq-dev/soniq-sidecar/config"
	"github.com/soniq-dev/soniq-sidecar/supervisor"
)

// writeManifest writes a manifest into a temporary directory and returns
// its path; the directory is removed by the returned func.
func writeManifest(text string) (string, func()) {
	dir, err := os.MkdirTemp("", "soniq-config-example-")
	if err != nil {
		log.Fatal(err)
	}
	path := filepath.Join(dir, "manifest.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		log.Fatal(err)
	}
	return path, func() { os.RemoveAll(dir) }
}

// A loaded manifest has every default filled in: a program reads its
// handlers and jobs as the engine will run them.
func ExampleManifest() {
	path, cleanup := writeManifest(`version: 1
handlers:
  - name: billing
    command: [python3, -m, billing_handlers]
    concurrency: 4
    jobs:
      - name: billing.charge
        cancellable: true
        timeout: 30s
      - name: billing.report
        cancellable: false
settings:
  job_timeout: 120
`)
	defer cleanup()
	m, err := supervisor.LoadManifest(path)
	if err != nil {
		log.Fatal(err)
	}
	settings, err := supervisor.ResolveSettings(m, nil, config.SettingOverrides{})
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range m.Handlers {
		fmt.Println(h.Name, h.Transport, "processes:", h.Processes, "concurrency:", h.Concurrency)
		for _, j := range h.Jobs {
			fmt.Println(" ", j.Name, "cancellable:", j.Cancellable, "timeout:", j.EffectiveTimeout(settings))
		}
	}
	// Output:
	// billing stdio processes: 1 concurrency: 4
	//   billing.charge cancellable: true timeout: 30s
	//   billing.report cancellable: false timeout: 2m0s
}

// Settings are resolved from Soniq's defaults, the manifest, the
// environment and the overrides, the highest layer winning.
func ExampleSettings() {
	path, cleanup := writeManifest(`version: 1
handlers:
  - name: billing
    command: [python3, -m, billing_handlers]
    jobs:
      - name: billing.charge
        cancellable: true
settings:
  shutdown_timeout: 10s
  poll_interval: 2
queues: [billing]
`)
	defer cleanup()
	m, err := supervisor.LoadManifest(path)
	if err != nil {
		log.Fatal(err)
	}
	env := map[string]string{"SONIQ_POLL_INTERVAL": "0.5"}
	lookupEnv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	shutdown := 45 * time.Second
	s, err := supervisor.ResolveSettings(m, lookupEnv, config.SettingOverrides{ShutdownTimeout: &shutdown})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("shutdown_timeout:", s.ShutdownTimeout) // the override
	fmt.Println("poll_interval:", s.PollInterval)       // the environment
	fmt.Println("queues:", s.Queues)                    // the manifest
	fmt.Println("heartbeat_interval:", s.HeartbeatInterval)
	// Output:
	// shutdown_timeout: 45s
	// poll_interval: 500ms
	// queues: [billing]
	// heartbeat_interval: 5s
}

// A bad manifest is a *config.ManifestError for each problem: the file,
// the line and the field.
func ExampleManifestError() {
	path, cleanup := writeManifest(`version: 1
handlers:
  - name: billing
    command: [python3, -m, billing_handlers]
    jobs:
      - name: billing.charge
        cancellable: true
        timeout: soon
`)
	defer cleanup()
	_, err := supervisor.LoadManifest(path)
	var me *config.ManifestError
	if errors.As(err, &me) {
		fmt.Println(filepath.Base(me.File), me.Line, me.Field)
		fmt.Println(me.Msg)
	}
	// Output:
	// manifest.yaml 8 handlers[0].jobs[0].timeout
	// invalid duration "soon" (want a Go duration like 30s or 1m30s, or a number of seconds)
}

// A bad setting is a *config.SettingError naming the setting, the layer
// it came from, and the name and value it had there.
func ExampleSettingError() {
	env := map[string]string{"SONIQ_JOB_TIMEOUT": "5m"} // the environment takes seconds, as Soniq does
	lookupEnv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	_, err := supervisor.ResolveSettings(nil, lookupEnv, config.SettingOverrides{})
	var se *config.SettingError
	if errors.As(err, &se) {
		fmt.Println(se.Setting, se.Source, se.Name, se.Value)
		fmt.Println(se.Msg)
	}
	// Output:
	// job_timeout environment SONIQ_JOB_TIMEOUT 5m
	// invalid duration: want a number of seconds, like 30 or 0.5
}
