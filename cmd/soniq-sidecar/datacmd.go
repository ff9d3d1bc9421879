package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/soniq-dev/soniq-sidecar/backends"
	"github.com/soniq-dev/soniq-sidecar/internal/config"
)

// dataSpec is a data command: one that opens the database, does one thing
// and closes it (migrate, enqueue, status, job, cancel, dead-letter …,
// schedule …). dataCommand writes what they all share: the database flags
// from the settings table, the URL resolved flag > environment > default,
// the argument checks before anything is opened, opening and closing.
type dataSpec struct {
	use, short, long, example string
	// flags declares the command's own flags; the database's are declared
	// for it.
	flags func(fs *pflag.FlagSet)
	// args checks the positional arguments. nil: the command takes none
	// ("<command>: unexpected argument …").
	args func(pos []string) error
	// check validates the flags' values once they are parsed, before the
	// database is opened, so a bad value changes nothing.
	check func(pos []string) error
	// plainOpen opens the database as it is, without creating an embedded
	// database's tables (migrate creates them itself).
	plainOpen bool
	// run does the command's work.
	run func(ctx context.Context, d dataRun) error
}

// dataRun is what a data command's run is handed: the environment, the
// open database, the resolved options and the positional arguments.
type dataRun struct {
	env
	b    backends.Backend
	opts config.Options
	args []string
}

// url is the database the command opened, as the options name it.
func (d dataRun) url() string { return databaseURL(d.opts) }

// dataCommand builds a data command from its spec. Errors of args and
// check are usage errors (exit 2); run's keep their own meaning.
func dataCommand(e env, s dataSpec) *cobra.Command {
	cmd := &cobra.Command{
		Use:     s.use,
		Short:   s.short,
		Long:    s.long,
		Example: s.example,
		Args:    cobra.ArbitraryArgs,
		// Their arguments are ids and names, never files.
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	db := config.RegisterFlags(cmd.Flags(), config.CommandData)
	if s.flags != nil {
		s.flags(cmd.Flags())
	}
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		opts, err := db.Options(e.lookupEnv)
		if err != nil {
			return usageError{err}
		}
		if s.args == nil {
			if len(pos) > 0 {
				return usageErrorf("%s: unexpected argument %q", commandName(cmd), pos[0])
			}
		} else if err := asUsage(s.args(pos)); err != nil {
			return err
		}
		if s.check != nil {
			if err := asUsage(s.check(pos)); err != nil {
				return err
			}
		}
		ctx := cmd.Context()
		var b backends.Backend
		if s.plainOpen {
			b, err = openBackend(ctx, opts)
		} else {
			b, err = openForCommand(ctx, e, opts)
		}
		if err != nil {
			return err
		}
		defer b.Close()
		return s.run(ctx, dataRun{env: e, b: b, opts: opts, args: pos})
	}
	return cmd
}

// asUsage makes err a usage error (exit 2) unless it already carries its
// exit code.
func asUsage(err error) error {
	var ue usageError
	var ce exitCodeError
	if err == nil || errors.As(err, &ue) || errors.As(err, &ce) {
		return err
	}
	return usageError{err}
}
