// Package config is the sidecar's configuration: the manifest (its types and
// the YAML decoding that reports file:line:field and "did you mean"), the
// runtime settings and their layering (flag > environment > manifest >
// default, every setting declared once in settingTable), and the retry
// policy. It depends on nothing else in the module; the engine and the
// commands read what it resolves. See docs/manifest.md.
package config
