// Package config is the sidecar's configuration: the manifest (its types and
// the YAML decoding that reports file:line:field and "did you mean"), the
// settings and their layering (flag > environment > manifest > default):
// the engine's and the command line's own, every one declared once in
// settingTable (table.go), from which the flags are registered; and the
// retry policy. It depends on nothing else in the module; the engine and the
// commands read what it resolves. See docs/manifest.md.
package config
