package config

import cfg "github.com/soniq-dev/soniq-sidecar/config"

// The configuration's types are the public package's (config/); the
// decoder, the settings table and their tests name them through these
// aliases, as the types they fill in.
type (
	Manifest         = cfg.Manifest
	ManifestSettings = cfg.ManifestSettings
	Handler          = cfg.Handler
	JobSpec          = cfg.JobSpec
	RetryPolicy      = cfg.RetryPolicy
	Limit            = cfg.Limit
	Rate             = cfg.Rate
	Transport        = cfg.Transport
	ManifestError    = cfg.ManifestError
	Settings         = cfg.Settings
	SettingOverrides = cfg.SettingOverrides
	SettingError     = cfg.SettingError
	Source           = cfg.Source
)

// The transports and the layers, as the public package names them.
const (
	TransportStdio = cfg.TransportStdio
	TransportUnix  = cfg.TransportUnix

	SourceDefault     = cfg.SourceDefault
	SourceManifest    = cfg.SourceManifest
	SourceEnvironment = cfg.SourceEnvironment
	SourceFlag        = cfg.SourceFlag
)

// DefaultRetryPolicy is Soniq's @app.job default: retry at once.
func DefaultRetryPolicy() RetryPolicy { return cfg.DefaultRetryPolicy() }

// IsGlob reports whether an attach entry is a pattern rather than a path.
func IsGlob(p string) bool { return cfg.IsGlob(p) }

// ParseRate reads "N/DURATION" (the public package's).
func ParseRate(s string) (Rate, error) { return cfg.ParseRate(s) }

// ParseLimitKey reads a limit's key, "args." and a dot path (the public
// package's).
func ParseLimitKey(s string) ([]string, error) { return cfg.ParseLimitKey(s) }
