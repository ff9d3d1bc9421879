package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// DefaultSettings returns Soniq's defaults for every setting.
func DefaultSettings() Settings {
	var s Settings
	for _, sp := range settingTable {
		switch {
		case sp.field != nil:
			*sp.field(&s) = sp.def
		case sp.intField != nil:
			*sp.intField(&s) = sp.defInt
		}
	}
	return s
}

// ResolveSettings layers flag > environment > manifest `settings:` > default
// (docs/manifest.md). m may be nil (no manifest) and lookupEnv nil (no environment,
// e.g. os.LookupEnv in main, a map in tests). Every bad value is reported,
// joined, each naming its variable or flag and the value.
func ResolveSettings(m *Manifest, lookupEnv func(string) (string, bool), flags SettingOverrides) (Settings, error) {
	s := DefaultSettings()
	if lookupEnv == nil {
		lookupEnv = func(string) (string, bool) { return "", false }
	}
	var ms ManifestSettings
	if m != nil {
		ms = m.Settings
	}
	var errs []error
	// from records where each value came from, for cross-field messages.
	from := map[string]origin{}

	for i := range settingTable {
		sp := &settingTable[i]
		switch {
		case sp.field != nil:
			errs = append(errs, resolveLayers(sp, sp.field(&s), *sp.manifest(&ms), *sp.override(&flags), ms.Where, lookupEnv, from,
				func(raw string) (time.Duration, error) { return envSeconds(raw, sp.zeroValid) },
				func(v time.Duration) error { return checkDuration(v, sp.zeroValid) },
				time.Duration.String)...)
		case sp.intField != nil:
			errs = append(errs, resolveLayers(sp, sp.intField(&s), *sp.intManifest(&ms), *sp.intOverride(&flags), ms.Where, lookupEnv, from,
				func(raw string) (int, error) { return envInt(raw, sp.zeroValid) },
				func(v int) error { return checkInt(v, sp.zeroValid) },
				strconv.Itoa)...)
		default:
			continue
		}
		if sp.key == "sync_handler_grace_seconds" {
			_, s.SyncGraceSet = from[sp.key]
		}
	}
	if !s.SyncGraceSet {
		s.SyncHandlerGrace = s.JobTimeout
	}

	queues := lookupSetting(queuesKey)
	s.Queues = ms.Queues
	if raw, ok := lookupEnv(queues.env); ok && strings.TrimSpace(raw) != "" {
		if q, err := parseQueueList(raw); err != nil {
			errs = append(errs, &SettingError{Setting: queues.key, Source: SourceEnvironment, Name: queues.env, Value: raw, Msg: err.Error()})
		} else {
			s.Queues = q
		}
	}
	if flags.Queues != nil && strings.TrimSpace(*flags.Queues) != "" {
		if q, err := parseQueueList(*flags.Queues); err != nil {
			errs = append(errs, &SettingError{Setting: queues.key, Source: SourceFlag, Name: queues.flag, Value: *flags.Queues, Msg: err.Error()})
		} else {
			s.Queues = q
		}
	}

	if len(errs) == 0 {
		errs = append(errs, checkHeartbeat(s, from, lookupEnv)...)
	}
	if len(errs) > 0 {
		return Settings{}, errors.Join(errs...)
	}
	return s, nil
}

// resolveLayers lays one engine setting's manifest value, environment
// variable and flag over dst, the default, recording in from where the
// value came from. The manifest's value was checked as it was decoded; the
// environment's is parsed and checked by parseEnv, the flag's (a program
// may set any value) by check. Each bad value is a *SettingError naming
// its layer.
func resolveLayers[T any](sp *setting, dst, fromManifest, fromFlag *T, where map[string]string,
	lookupEnv func(string) (string, bool), from map[string]origin,
	parseEnv func(string) (T, error), check func(T) error, format func(T) string) []error {
	var errs []error
	if fromManifest != nil {
		*dst = *fromManifest
		from[sp.key] = origin{SourceManifest, "manifest " + where[sp.key]}
	}
	if raw, ok := lookupEnv(sp.env); ok && strings.TrimSpace(raw) != "" {
		// Empty counts as unset, so `SONIQ_X=` in a compose file is harmless.
		if v, err := parseEnv(raw); err != nil {
			errs = append(errs, &SettingError{Setting: sp.key, Source: SourceEnvironment, Name: sp.env, Value: raw, Msg: err.Error()})
		} else {
			*dst = v
			from[sp.key] = origin{SourceEnvironment, sp.env}
		}
	}
	if fromFlag != nil {
		if err := check(*fromFlag); err != nil {
			errs = append(errs, &SettingError{Setting: sp.key, Source: SourceFlag, Name: sp.flag, Value: format(*fromFlag), Msg: err.Error()})
		} else {
			*dst = *fromFlag
			from[sp.key] = origin{SourceFlag, sp.flag}
		}
	}
	return errs
}

// Soniq's own bounds on its workers' heartbeat settings (soniq.settings):
// a Soniq worker beats every heartbeat_interval (0.1 s to 60 s) and
// recovers workers silent for heartbeat_timeout (60 s to 7200 s). Sidecars
// and Soniq workers recover each other, so both sides must fit both.
const (
	soniqMinHeartbeatTimeout  = 60 * time.Second
	soniqMaxHeartbeatInterval = 60 * time.Second
	// heartbeatMargin is how many beats a timeout must span, so that one
	// slow or lost beat never makes a live worker look dead.
	heartbeatMargin = 2
)

// AllowShortHeartbeatEnv lifts Soniq's floor on heartbeat_timeout for
// databases no Soniq worker uses (tests, sidecar-only fleets).
const AllowShortHeartbeatEnv = "SONIQ_ALLOW_SHORT_HEARTBEAT_TIMEOUT"

// checkHeartbeat refuses heartbeat settings under which a live worker, a
// sidecar or a Soniq worker, could be recovered as stale and its jobs run
// twice.
func checkHeartbeat(s Settings, from map[string]origin, lookupEnv func(string) (string, bool)) []error {
	var errs []error
	timeoutErr := func(msg string, args ...any) {
		errs = append(errs, &SettingError{Setting: "heartbeat_timeout", Source: from["heartbeat_timeout"].layer(),
			Name: "heartbeat_timeout", Value: s.HeartbeatTimeout.String(),
			Msg: fmt.Sprintf("(from %s) ", settingSource(from, "heartbeat_timeout")) + fmt.Sprintf(msg, args...)})
	}
	if s.HeartbeatTimeout < heartbeatMargin*s.HeartbeatInterval {
		timeoutErr("must be at least %d × heartbeat_interval %s (from %s), or a live worker whose beat is late once would be recovered as stale and its jobs run twice",
			heartbeatMargin, s.HeartbeatInterval, settingSource(from, "heartbeat_interval"))
		return errs
	}
	raw, _ := lookupEnv(AllowShortHeartbeatEnv)
	if allow, _ := strconv.ParseBool(strings.TrimSpace(raw)); allow {
		return errs
	}
	if s.HeartbeatTimeout < soniqMinHeartbeatTimeout {
		timeoutErr("must be at least %s: Soniq workers refuse less and may beat only every %s, so a shorter timeout recovers live Soniq workers' jobs "+
			"(set %s=true only if no Soniq worker ever uses this database)", soniqMinHeartbeatTimeout, soniqMaxHeartbeatInterval, AllowShortHeartbeatEnv)
	}
	if s.HeartbeatInterval > soniqMinHeartbeatTimeout/heartbeatMargin {
		errs = append(errs, &SettingError{Setting: "heartbeat_interval", Source: from["heartbeat_interval"].layer(),
			Name: "heartbeat_interval", Value: s.HeartbeatInterval.String(), Msg: fmt.Sprintf(
				"(from %s) must be at most %s: a Soniq worker may recover workers silent for %s, and this sidecar must beat at least %d times in that window",
				settingSource(from, "heartbeat_interval"), soniqMinHeartbeatTimeout/heartbeatMargin, soniqMinHeartbeatTimeout, heartbeatMargin)})
	}
	return errs
}

// origin is where a setting's value came from: the layer, and how an
// error names it ("manifest m.yaml:4", SONIQ_JOB_TIMEOUT, --job-timeout).
type origin struct {
	source Source
	desc   string
}

// layer is the origin's layer; the zero origin is the default.
func (o origin) layer() Source {
	if o.source == "" {
		return SourceDefault
	}
	return o.source
}

func settingSource(from map[string]origin, key string) string {
	if f, ok := from[key]; ok {
		return f.desc
	}
	return "the default"
}

// parseQueueList splits a comma-separated list as Soniq does, dropping
// empty items.
func parseQueueList(raw string) ([]string, error) {
	var out []string
	for _, q := range strings.Split(raw, ",") {
		q = strings.TrimSpace(q)
		if q == "" {
			continue
		}
		if err := checkQueueName(q); err != nil {
			return nil, err
		}
		if !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out, nil
}
