package main

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// rootLong is the top-level help's description.
const rootLong = `soniq-sidecar — run Soniq jobs in Python and Node handler processes

The database is --database-url, else $SONIQ_DATABASE_URL, else sqlite:soniq.db in the
working directory. postgres:// and postgresql:// select Postgres; sqlite:PATH (or a
path ending in .db) selects SQLite. On Postgres only migrate changes the schema.
Behind PgBouncer in transaction mode set SONIQ_DATABASE_POOLER=transaction (and
optionally SONIQ_DATABASE_LISTEN_URL); migrate needs a direct URL.

Exit codes: 0 success (asking for help included), 1 the operation failed,
2 the command line or the configuration is wrong.`

const rootExample = `  soniq-sidecar run --manifest manifest.yaml
  soniq-sidecar enqueue send.mail --args '{"to":"a@example.com"}'
  soniq-sidecar status
  soniq-sidecar dead-letter list --since 1h
  source <(soniq-sidecar completion bash)`

// The command groups of the top-level help.
const (
	groupRun  = "run"
	groupJobs = "jobs"
)

// newRootCmd builds the command tree. Every command writes through e; the
// errors come back to runMain, which turns them into the exit code.
func newRootCmd(e env) *cobra.Command {
	root := &cobra.Command{
		Use:     "soniq-sidecar",
		Short:   "Run Soniq jobs in Python and Node handler processes",
		Long:    rootLong,
		Example: rootExample,
		Version: version,
		Args:    unknownCommand,
		// Alone, the command prints its usage on stderr and exits 2: a
		// script that lost its command must not pass.
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SetOut(e.stderr)
			_ = cmd.Help()
			return exitCodeError{code: exitUsage}
		},
		// runMain prints errors (and says how to get help) once.
		SilenceErrors:              true,
		SilenceUsage:               true,
		SuggestionsMinimumDistance: 2,
	}
	root.SetVersionTemplate("soniq-sidecar {{.Version}}\n")
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetIn(e.stdin)
	root.SetFlagErrorFunc(flagError)
	root.SetHelpCommand(newHelpCmd())
	root.AddGroup(&cobra.Group{ID: groupRun, Title: "Running the sidecar:"},
		&cobra.Group{ID: groupJobs, Title: "Jobs, schedules and the database:"})
	for _, c := range []*cobra.Command{newRunCmd(e), newManifestCmd(e)} {
		c.GroupID = groupRun
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newMigrateCmd(e), newEnqueueCmd(e), newStatusCmd(e), newJobCmd(e),
		newCancelCmd(e), newDeadLetterCmd(e), newScheduleCmd(e), newLimitCmd(e)} {
		c.GroupID = groupJobs
		root.AddCommand(c)
	}
	root.AddCommand(newVersionCmd(e))
	// cobra adds help and completion as it executes; added here, they are
	// in the tree for the loop below and for the tests that walk it.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			// cobra's completion command, alone or with a shell it does
			// not know, would print its help and exit 0.
			c.Args = cobra.ArbitraryArgs
			c.RunE = groupRunE("completion: want a shell: bash, zsh, fish or powershell", "bash, zsh, fish or powershell")
			c.SuggestionsMinimumDistance = 2
		}
	}
	argErrorsAreUsageErrors(root)
	return root
}

// argErrorsAreUsageErrors makes the argument checks of cmd and the
// commands under it (cobra's own among them: completion's, version's)
// report usage errors, so wrong arguments exit 2 everywhere.
func argErrorsAreUsageErrors(cmd *cobra.Command) {
	if check := cmd.Args; check != nil {
		cmd.Args = func(c *cobra.Command, args []string) error { return asUsage(check(c, args)) }
	}
	for _, sub := range cmd.Commands() {
		argErrorsAreUsageErrors(sub)
	}
}

func newVersionCmd(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintf(e.stdout, "soniq-sidecar %s\n", version)
			return nil
		},
	}
}

// newGroup is a command that only holds subcommands (dead-letter,
// schedule, manifest). Given none it exits 2 with missing; given one it
// does not have, it exits 2 naming it and what it wants.
func newGroup(use, short, long, missing, want string, subs ...*cobra.Command) *cobra.Command {
	g := &cobra.Command{
		Use:                        use,
		Short:                      short,
		Long:                       long,
		DisableFlagsInUseLine:      true,
		Args:                       cobra.ArbitraryArgs,
		RunE:                       groupRunE(missing, want),
		SuggestionsMinimumDistance: 2,
	}
	g.AddCommand(subs...)
	return g
}

// groupRunE is what a group does when no subcommand of it was named: a
// usage error, missing when nothing followed the group, else one naming
// the word and what the group wants.
func groupRunE(missing, want string) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return usageErrorf("%s", missing)
		}
		return usageErrorf("%s: unknown subcommand %q (want %s)%s", cmd.Name(), args[0], want, didYouMean(cmd, args[0]))
	}
}

// newHelpCmd is `help [command]`: the command's help, exit 0; a command
// that does not exist is a usage error (exit 2), not a help page.
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "Help prints the help of any command, as its --help does: soniq-sidecar help dead-letter replay.",
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					out = append(out, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil {
				return usageError{err}
			}
			if len(rest) > 0 {
				return usageErrorf("help: %s has no command %q%s (soniq-sidecar --help lists the commands)",
					cmd.CommandPath(), rest[0], didYouMean(cmd, rest[0]))
			}
			cmd.InitDefaultHelpFlag() // so its help lists -h, --help
			return cmd.Help()
		},
	}
}

// unknownCommand is the top level's argument check: a word that names no
// command is a usage error.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return usageErrorf("unknown command %q%s (soniq-sidecar --help lists the commands)", args[0], didYouMean(cmd, args[0]))
}

// didYouMean names the subcommands of cmd that typed is close to, or "".
func didYouMean(cmd *cobra.Command, typed string) string {
	s := cmd.SuggestionsFor(typed)
	if len(s) == 0 {
		return ""
	}
	return "; did you mean " + strings.Join(s, " or ") + "?"
}

// commandName is a command as its messages name it: its path without the
// binary's name ("dead-letter list").
func commandName(cmd *cobra.Command) string {
	_, name, _ := strings.Cut(cmd.CommandPath(), " ")
	return cmp.Or(name, cmd.Name())
}

// flagError turns a flag the command line got wrong into a usage error
// (exit 2) worded as the CLI's flag errors always were ("flag provided but
// not defined: -colour", "invalid value "x" for flag -limit: …"), naming
// the command and where its flags are listed.
func flagError(cmd *cobra.Command, err error) error {
	var (
		notExist *pflag.NotExistError
		invalid  *pflag.InvalidValueError
		required *pflag.ValueRequiredError
	)
	msg := err.Error()
	switch {
	case errors.As(err, &notExist):
		typed := notExist.GetSpecifiedShortnames()
		if typed == "" {
			typed = notExist.GetSpecifiedName()
		}
		msg = "flag provided but not defined: -" + typed
	case errors.As(err, &invalid):
		f := invalid.GetFlag()
		cause := invalid.Unwrap()
		var ne *strconv.NumError
		if errors.As(cause, &ne) {
			// strconv's own words name a Go function; say what was wrong.
			cause = errors.New("parse error")
			if errors.Is(ne.Err, strconv.ErrRange) {
				cause = errors.New("value out of range")
			}
		}
		if f.Value.Type() == "bool" {
			msg = fmt.Sprintf("invalid boolean value %q for -%s: %v", invalid.GetValue(), f.Name, cause)
		} else {
			msg = fmt.Sprintf("invalid value %q for flag -%s: %v", invalid.GetValue(), f.Name, cause)
		}
	case errors.As(err, &required):
		msg = "flag needs an argument: -" + required.GetSpecifiedName()
	}
	return usageErrorf("%s: %s (see %s --help)", commandName(cmd), msg, cmd.CommandPath())
}

// longFlagsWithOneDash rewrites -name and -name=value as --name when name
// is a long flag of the command the line names: the CLI took both forms
// before it moved to cobra, and scripts written then keep working.
// Everything after "--" is left as it is.
func longFlagsWithOneDash(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd == nil {
		return args
	}
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			if len(name) > 1 && (name == "help" || cmd.Flags().Lookup(name) != nil || cmd.InheritedFlags().Lookup(name) != nil ||
				(cmd == root && name == "version")) {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}
