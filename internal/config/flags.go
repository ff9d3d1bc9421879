package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Options are the settings of the command line itself, around the
// engine's Settings: where the database is and how to reach it, which
// manifest, the sidecar's name, and how `run` starts and ends. Flags and
// the environment set them; the manifest does not.
type Options struct {
	// DatabaseURL is "" when none is given: the commands' default database.
	DatabaseURL    string
	DatabasePooler string
	ListenURL      string
	// Manifest is "" when none is given.
	Manifest string
	// Instance is "" when none is given: the engine's default name.
	Instance               string
	DatabaseWait           time.Duration
	MetricsFinalScrapeWait time.Duration
	MetricsAddr            string
	LogFormat              string
	Once                   bool
	DeadLetterUnknown      bool
}

// Flags are a command's settings given as flags; the flag set's Parse
// fills them in.
type Flags struct {
	cmd       Command
	overrides SettingOverrides
	given     map[string]any // command settings by key, parsed
}

// FlagSet is where RegisterFlags declares flags: the standard library's
// *flag.FlagSet and the CLI's *pflag.FlagSet both are one, so this
// package names no command-line library.
type FlagSet interface {
	Func(name, usage string, fn func(string) error)
	BoolFunc(name, usage string, fn func(string) error)
}

// RegisterFlags registers, as flags of fs, the settings cmd takes as
// flags: for `run` every setting of the table, for the data commands the
// database URL. A duration flag takes a Go duration (90s, 1m30s) or a
// number of seconds, as in the manifest; a number flag a whole number.
func RegisterFlags(fs FlagSet, cmd Command) *Flags {
	f := &Flags{cmd: cmd, given: map[string]any{}}
	for i := range settingTable {
		sp := &settingTable[i]
		in := sp.flagIn
		if sp.engine() {
			in = CommandRun
		}
		if sp.flag == "" || in&cmd == 0 {
			continue
		}
		name := strings.TrimPrefix(sp.flag, "--")
		set := func(raw string) error { return f.set(sp, raw) }
		if sp.kind == kindBool {
			fs.BoolFunc(name, sp.usage(), set)
		} else {
			fs.Func(name, sp.usage(), set)
		}
	}
	return f
}

// set records one flag's value; an error is reported by the flag set,
// naming the flag.
func (f *Flags) set(sp *setting, raw string) error {
	if sp.kind == kindQueues {
		if raw != "" {
			f.overrides.Queues = &raw
		}
		return nil
	}
	v, err := sp.parse(raw, false)
	if err != nil {
		return err
	}
	switch {
	case v == nil:
		// Empty: not given.
	case sp.engine() && sp.kind == kindInt:
		n := v.(int)
		*sp.intOverride(&f.overrides) = &n
	case sp.key == schedulerKey:
		b := v.(bool)
		f.overrides.Scheduler = &b
	case sp.engine():
		d := v.(time.Duration)
		*sp.override(&f.overrides) = &d
	default:
		f.given[sp.key] = v
	}
	return nil
}

// Overrides are the engine settings given as flags, for ResolveSettings.
func (f *Flags) Overrides() SettingOverrides { return f.overrides }

// Options resolves the settings of the command line that the command
// reads: flag > environment > default. Every bad value in the environment
// is reported, joined, each as a *SettingError naming its variable.
func (f *Flags) Options(lookupEnv func(string) (string, bool)) (Options, error) {
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	var o Options
	var errs []error
	for i := range settingTable {
		sp := &settingTable[i]
		if sp.engine() || sp.uses&f.cmd == 0 {
			continue
		}
		v, ok := f.given[sp.key]
		if !ok && sp.env != "" {
			if raw, set := lookupEnv(sp.env); set {
				var err error
				if v, err = sp.parse(raw, true); err != nil {
					errs = append(errs, &SettingError{Setting: sp.key, Source: SourceEnvironment, Name: sp.env, Value: raw, Msg: err.Error()})
					continue
				}
				ok = v != nil
			}
		}
		if !ok {
			v = sp.defaultValue()
		}
		switch p := sp.option(&o).(type) {
		case *string:
			*p = v.(string)
		case *bool:
			*p = v.(bool)
		case *time.Duration:
			*p = v.(time.Duration)
		case *int:
			*p = v.(int)
		}
	}
	return o, errors.Join(errs...)
}

// defaultValue is a command setting's value when nothing sets it.
func (sp *setting) defaultValue() any {
	switch sp.kind {
	case kindDuration:
		return sp.def
	case kindInt:
		return sp.defInt
	case kindBool:
		return false
	}
	return sp.defText
}

// parse reads a setting's text from a flag or, with fromEnv, from the
// environment. It returns nil for a value that counts as not given: empty
// (so `SONIQ_X=` in a compose file is harmless), unless an empty flag is
// a value of the setting.
func (sp *setting) parse(raw string, fromEnv bool) (any, error) {
	s := strings.TrimSpace(raw)
	if s == "" && (fromEnv || !sp.emptyIsValue) {
		return nil, nil
	}
	switch sp.kind {
	case kindDuration:
		if fromEnv {
			return envSeconds(s, sp.zeroValid)
		}
		d, err := ParseDuration(s)
		if err == nil && !sp.engine() {
			// An engine setting's zero is refused when the layers are
			// combined, naming the flag (ResolveSettings).
			err = checkDuration(d, sp.zeroValid)
		}
		return d, err
	case kindInt:
		if fromEnv {
			return envInt(s, sp.zeroValid)
		}
		n, err := parseInt(s)
		if err == nil && !sp.engine() {
			err = checkInt(n, sp.zeroValid)
		}
		return n, err
	case kindBool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, fmt.Errorf("want true or false, got %q", raw)
		}
		return b, nil
	}
	return s, nil
}
