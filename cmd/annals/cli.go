package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/annals-go/annals/cmd/annals/internal/stores"
)

// env is what a command runs with.
type env struct {
	ctx            context.Context
	stdout, stderr io.Writer
	stdin          *bufio.Reader
	interactive    bool // stdin is a terminal: confirmations may be asked
	getenv         func(string) string
	mux            *stores.Mux
}

// command is one of annals' commands.
type command struct {
	name     string
	args     string // the arguments after the flags, for the synopsis
	summary  string // one line, for 'annals help'
	help     string // what it does, and its --json shape
	examples []string
	// minArgs and maxArgs bound the positional arguments (maxArgs < 0: any).
	minArgs, maxArgs int
	// setup registers the command's flags on fs and returns the function
	// that runs it with the positional arguments, once fs is parsed.
	setup func(fs *flag.FlagSet) func(e *env, args []string) error
}

func commands() []*command {
	return []*command{
		demoCommand(),
		initCommand(), migrateCommand(),
		idsCommand(), eventsCommand(), snapshotsCommand(), stateCommand(), statsCommand(),
		tailCommand(),
		deleteToCommand(), deleteSnapshotsCommand(),
		copyCommand(), projectionsCommand(),
		benchCommand(), checkCommand(), crashTestCommand(), verifyCommand(),
		replicateCommand(), skipRecordCommand(), purgeExpiredCommand(), rewriteSerializerCommand(),
		clusterCommand(), consoleCommand(),
	}
}

func findCommand(name string) *command {
	for _, c := range commands() {
		if c.name == name && c.setup != nil {
			return c
		}
	}
	return nil
}

func (c *command) flagSet(output io.Writer) (*flag.FlagSet, func(e *env, args []string) error) {
	fs := flag.NewFlagSet("annals "+c.name, flag.ContinueOnError)
	fs.SetOutput(output)
	runner := c.setup(fs)
	fs.Usage = func() { c.usage(fs.Output(), fs) }
	return fs, runner
}

// printHelp prints the command's usage, flags and examples.
func (c *command) printHelp(w io.Writer) {
	fs, _ := c.flagSet(w)
	c.usage(w, fs)
}

func (c *command) usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: annals %s [flags]", c.name)
	if c.args != "" {
		fmt.Fprintf(w, " %s", c.args)
	}
	fmt.Fprintf(w, "\n\n%s\n", strings.TrimSpace(c.help))
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprint(w, "\nFlags:\n")
		printFlags(w, fs)
	}
	if len(c.examples) > 0 {
		fmt.Fprint(w, "\nExamples:\n")
		for _, ex := range c.examples {
			fmt.Fprintf(w, "  %s\n", ex)
		}
	}
}

// printFlags prints the flags as --name VALUE, with their usage and
// default. Flags whose usage starts with "(hidden)" are left out.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if strings.HasPrefix(f.Usage, "(hidden)") {
			return
		}
		name, usage := flag.UnquoteUsage(f)
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		switch f.DefValue {
		case "", "false", "0":
		case strconv.FormatInt(math.MaxInt64, 10):
			usage += " (default: no bound)"
		default:
			usage += fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(w, "%s\n      %s\n", line, usage)
	})
}

// run parses args (flags may come before and after the positional
// arguments; "--" ends the flags) and runs the command.
//
// Help asked for (-h, --help) goes to stdout, as 'annals help COMMAND'
// prints it, with exit code 0; a bad command line's message and usage go
// to stderr, with exit code 2. A command whose context ends while it runs
// exits 130, saying "interrupted" (exitCode).
func (c *command) run(e *env, args []string) int {
	prog := "annals " + c.name
	var parseOut bytes.Buffer
	fs, runner := c.flagSet(&parseOut)
	pos, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		c.printHelp(e.stdout)
		return exitOK
	}
	if err != nil {
		_, _ = parseOut.WriteTo(e.stderr)
		return exitCode(context.Background(), e.stderr, prog, errUsage) // the command has not run
	}
	if len(pos) < c.minArgs || (c.maxArgs >= 0 && len(pos) > c.maxArgs) {
		want := c.args
		if want == "" {
			want = "no arguments"
		}
		return exitCode(context.Background(), e.stderr, prog, usagef("want %s, got %d argument(s): %s", want, len(pos), strings.Join(quoteAll(pos), " ")))
	}
	return exitCode(e.ctx, e.stderr, prog, runner(e, pos))
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// parseInterleaved parses fs from args, letting flags follow positional
// arguments, and returns the positional ones.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// storeFlag registers --store.
func storeFlag(fs *flag.FlagSet) *string {
	return fs.String("store", "", "the store `URL`: sqlite:PATH, postgres://USER@HOST/DB, cassandra://HOST:PORT/KEYSPACE, kafka://HOST:PORT/?eventual=URL or memory: (default $ANNALS_STORE)")
}

// jsonFlag registers --json.
func jsonFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("json", false, "print JSON for scripts instead of a table")
}

// storeURL is --store, or $ANNALS_STORE.
func (e *env) storeURL(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if v := e.getenv("ANNALS_STORE"); v != "" {
		return v, nil
	}
	return "", usagef("set --store URL or ANNALS_STORE (e.g. sqlite:./annals.db)")
}

// open opens the store of --store (or $ANNALS_STORE) in mode.
func (e *env) open(flagValue string, mode stores.Mode) (*stores.Store, error) {
	url, err := e.storeURL(flagValue)
	if err != nil {
		return nil, err
	}
	return e.mux.Open(e.ctx, url, mode)
}

// confirm asks question on the terminal unless yes; without a terminal it
// refuses (a usage error: pass --yes).
func (e *env) confirm(question string, yes bool) error {
	if yes {
		return nil
	}
	if !e.interactive {
		return usagef("refusing without confirmation: standard input is not a terminal; pass --yes (or --dry-run to see what would change)")
	}
	fmt.Fprintf(e.stderr, "%s [y/N] ", question)
	line, _ := e.stdin.ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return errCancelled
}

var errCancelled = fmt.Errorf("cancelled; nothing changed")

// table returns a writer of tab-separated columns; call Flush at the end.
func table(w io.Writer, header ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(header) > 0 {
		fmt.Fprintln(tw, strings.Join(header, "\t"))
	}
	return tw
}

func row(w io.Writer, cols ...any) {
	for i, c := range cols {
		if i > 0 {
			fmt.Fprint(w, "\t")
		}
		fmt.Fprint(w, c)
	}
	fmt.Fprintln(w)
}

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
