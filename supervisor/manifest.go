package supervisor

import "github.com/soniq-dev/soniq-sidecar/internal/config"

// Manifest is a loaded, validated manifest: the handlers to run, the jobs
// each serves and their branch (cancellable or not), and optional
// settings. Its format is documented in docs/manifest.md.
type Manifest = config.Manifest

// Settings are the resolved timings and queues a Supervisor runs with.
type Settings = config.Settings

// SettingOverrides are values that outrank the environment and the
// manifest (the command line's flags); a nil field is not given.
type SettingOverrides = config.FlagOverrides

// LoadManifest reads and validates a manifest file (YAML or JSON). Its
// errors name the file, the line and the field.
func LoadManifest(path string) (*Manifest, error) {
	return config.LoadManifest(path)
}

// ResolveSettings layers the settings as the command does: Soniq's
// defaults, then the manifest's settings block, then the environment
// (SONIQ_* variables, read through lookupEnv; nil reads none), then
// overrides. It refuses values under which a live worker could look dead
// to another.
func ResolveSettings(m *Manifest, lookupEnv func(string) (string, bool), overrides SettingOverrides) (Settings, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	return config.ResolveSettings(m, lookupEnv, overrides)
}
