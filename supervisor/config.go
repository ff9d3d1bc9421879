package supervisor

import (
	"github.com/soniq-dev/soniq-sidecar/config"
	internalconfig "github.com/soniq-dev/soniq-sidecar/internal/config"
)

// LoadManifest reads and validates a manifest file (YAML or JSON). Every
// problem it finds is a *config.ManifestError naming the file, the line
// and the field; several are joined (errors.Join).
func LoadManifest(path string) (*config.Manifest, error) {
	return internalconfig.LoadManifest(path)
}

// ResolveSettings layers the settings as the command does: Soniq's
// defaults, then the manifest's settings block, then the environment
// (SONIQ_* variables, read through lookupEnv; nil reads none), then
// overrides. It refuses values under which a live worker could look dead
// to another. Every bad value is a *config.SettingError naming the
// setting and the layer it came from; several are joined (errors.Join).
func ResolveSettings(m *config.Manifest, lookupEnv func(string) (string, bool), overrides config.SettingOverrides) (config.Settings, error) {
	return internalconfig.ResolveSettings(m, lookupEnv, overrides)
}

// defaultSettings are Soniq's defaults, which New gives the intervals a
// partial Settings leaves at 0.
func defaultSettings() config.Settings { return internalconfig.DefaultSettings() }
