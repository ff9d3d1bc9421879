package supervisor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/backends/sqlite"
	"github.com/soniq-dev/soniq-sidecar/config"
	"github.com/soniq-dev/soniq-sidecar/supervisor"
)

// A Go program embeds the sidecar: it loads a manifest, opens a backend,
// and runs the supervisor until it stops. Once makes it stop when nothing
// is due; a long-running program instead calls Shutdown (on SIGTERM, say),
// which applies the shutdown contract, and waits for Run to return.
func Example() {
	ctx := context.Background()
	m, err := supervisor.LoadManifest("../examples/python/manifest.yaml")
	if err != nil {
		log.Fatal(err)
	}
	settings, err := supervisor.ResolveSettings(m, nil, config.SettingOverrides{})
	if err != nil {
		log.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "soniq-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(ctx, filepath.Join(dir, "jobs.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := db.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	job, err := db.Enqueue(ctx, backends.EnqueueParams{Name: "examples.add", Args: json.RawMessage(`{"a": 2, "b": 3}`)})
	if err != nil {
		log.Fatal(err)
	}

	sup, err := supervisor.New(supervisor.Config{
		Manifest: m,
		Settings: settings,
		Backend:  db,
		Logger:   slog.New(slog.DiscardHandler),
		Once:     true,
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := sup.Run(ctx); err != nil {
		log.Fatal(err)
	}

	done, err := db.Get(ctx, job.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(done.Status, string(done.Result))
	// Output: done {"sum":5}
}

// LoadManifest validates what it reads; errors name the file, line and field.
func ExampleLoadManifest() {
	m, err := supervisor.LoadManifest("../examples/python/manifest.yaml")
	if err != nil {
		log.Fatal(err)
	}
	for _, h := range m.Handlers {
		fmt.Println(h.Name, h.Transport, len(h.Jobs), "jobs")
	}
	// Output: python-examples stdio 7 jobs
}
