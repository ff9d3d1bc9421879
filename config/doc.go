// Package config holds the sidecar's configuration as an embedding program
// reads and builds it: the manifest (Manifest, Handler, JobSpec,
// RetryPolicy), the engine's resolved settings (Settings) and the values
// that outrank the environment (SettingOverrides), and the errors that
// locate a bad manifest or setting (ManifestError, SettingError), for
// errors.As.
//
// supervisor.LoadManifest reads and validates a manifest file and
// supervisor.ResolveSettings layers the settings as the soniq-sidecar
// command does; docs/manifest.md is the format. The package holds the
// types and their methods only (a job's effective timeout, a retry
// policy's delays), and imports nothing of the module.
package config
