package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// Shell completion: simba completion bash|zsh prints a script that the
// shell loads; on each Tab the script runs simba __complete with the words
// typed so far, and offers what it prints, one candidate a line:
// commands, flags, the values of -o, and the names the backend shows
// (elections, jobs, groups, members), read within completeTimeout. A
// backend that cannot be read offers no names, silently.

// completeCommand is the hidden command the scripts run.
const completeCommand = "__complete"

// completeTimeout bounds the backend read of a completion (--timeout
// shortens it).
const completeTimeout = time.Second

var completionCommand = &command{
	name: "completion", args: "bash|zsh", minArgs: 1, maxArgs: 1,
	summary: "print a shell completion script",
	doc: `Completes commands, flags, output formats, and the names of elections,
jobs, groups and members read from the backend (as the global flags or
the environment name it; within 1s, silently nothing when it does not
answer). Load it in the shell's startup file:

  bash:  source <(simba completion bash)        (in ~/.bashrc)
  zsh:   source <(simba completion zsh)         (in ~/.zshrc, after compinit)
         or: simba completion zsh > "${fpath[1]}/_simba"`,
	setup: func(*flag.FlagSet) action {
		return func(_ context.Context, inv *invocation, args []string) error {
			script, ok := completionScripts[args[0]]
			if !ok {
				return usagef(nil, "completion: unknown shell %q (bash or zsh)", args[0])
			}
			_, err := io.WriteString(inv.stdout, script)
			return err
		}
	},
}

var completionScripts = map[string]string{
	"bash": `# bash completion for simba. Load it with: source <(simba completion bash)
_simba() {
    local line="${COMP_LINE:0:COMP_POINT}"
    local -a words
    read -r -a words <<<"$line"
    [[ -z $line || $line == *[[:space:]] ]] && words+=("")
    local IFS=$'\n'
    COMPREPLY=($("${words[0]}" ` + completeCommand + ` -- "${words[@]:1}" 2>/dev/null))
}
complete -o default -F _simba simba
`,
	"zsh": `#compdef simba
# zsh completion for simba. Load it with: source <(simba completion zsh)
# (after compinit), or write it as _simba into a directory of $fpath.
_simba() {
    local -a candidates
    candidates=(${(f)"$(${words[1]} ` + completeCommand + ` -- "${(@)words[2,CURRENT]}" 2>/dev/null)"})
    if (( ${#candidates} )); then
        compadd -- "${candidates[@]}"
    else
        _files
    fi
}
if [[ ${funcstack[1]} == _simba ]]; then
    _simba "$@"
else
    compdef _simba simba
fi
`,
}

// complete prints the candidates for the last of words, the word being
// completed ("" for a new one), given the words before it: the command line
// after the program's name.
func (c *cli) complete(ctx context.Context, words []string) int {
	if len(words) > 0 && words[0] == "--" {
		words = words[1:]
	}
	if len(words) == 0 {
		words = []string{""}
	}
	cur, before := words[len(words)-1], words[:len(words)-1]
	for _, s := range c.candidates(ctx, before, cur) {
		if strings.HasPrefix(s, cur) {
			fmt.Fprintln(c.stdout, s)
		}
	}
	return exitOK
}

// candidates lists what may come after the words before cur.
func (c *cli) candidates(ctx context.Context, before []string, cur string) []string {
	g := globals{etcd: c.getenv(envEtcd), zk: c.getenv(envZK), postgres: c.getenv(envPostgres), mysql: c.getenv(envMySQL), kube: kubeFromEnv(c.getenv, c.saDir), prefix: c.getenv(envPrefix), output: outTable, timeout: completeTimeout}
	var w watchFlags
	explicit := map[string]bool{}
	var cmd *command
	help := false
	flags := func() *flag.FlagSet {
		fs := flag.NewFlagSet("simba", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		if cmd != nil {
			cmd.setup(fs)
			if cmd.shows {
				w.register(fs)
			}
		}
		g.register(fs)
		return fs
	}
	fs := flags()
	var pos []string
	for i := 0; i < len(before); i++ {
		word := before[i]
		if word == "--" {
			pos = append(pos, before[i+1:]...)
			break
		}
		if len(word) > 1 && strings.HasPrefix(word, "-") {
			name, value, hasValue := strings.Cut(strings.TrimLeft(word, "-"), "=")
			f := fs.Lookup(name)
			if f == nil {
				continue
			}
			if !hasValue && !isBoolFlag(f) {
				if i+1 == len(before) { // cur is the flag's value
					return flagValues(name)
				}
				i++
				value, hasValue = before[i], true
			}
			if hasValue {
				f.Value.Set(value)
			}
			explicit[name] = true
			continue
		}
		switch {
		case cmd == nil && !help && word == "help":
			help = true
		case cmd == nil && !help:
			if cmd = lookup(word); cmd == nil {
				return nil
			}
			fs = flags()
		default:
			pos = append(pos, word)
		}
	}
	if strings.HasPrefix(cur, "-") {
		return flagNames(fs)
	}
	switch {
	case help && len(pos) == 0:
		return commandNames()
	case help:
		return nil
	case cmd == nil:
		return append(commandNames(), "help")
	case cmd.maxArgs >= 0 && len(pos) >= cmd.maxArgs:
		return nil
	case cmd == completionCommand:
		return slices.Sorted(maps.Keys(completionScripts))
	}
	g.timeout = min(g.timeout, completeTimeout)
	return c.backendNames(ctx, cmd, g, explicit)
}

// backendNames lists the names cmd's argument may take that the backend
// shows, or nothing when it cannot be read within g.timeout.
func (c *cli) backendNames(ctx context.Context, cmd *command, g globals, explicit map[string]bool) []string {
	names, ok := argNames[cmd.name]
	if !ok {
		return nil
	}
	quiet := *c
	quiet.stdout, quiet.stderr, quiet.hinted = io.Discard, io.Discard, true
	inv := &invocation{cli: &quiet, g: g, cmd: cmd, explicit: explicit}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	s, err := inv.readSnapshot(ctx)
	inv.close(ctx)
	if err != nil {
		return nil
	}
	return names(s)
}

// argNames gives, for each command that takes a name, the names it may
// take.
var argNames = map[string]func(*snapshot) []string{
	"status":  func(s *snapshot) []string { return s.names() },
	"history": func(s *snapshot) []string { return s.jobNames() },
	"audit":   func(s *snapshot) []string { return sortedUnion(sortedUnion(s.names(), s.members()), opNames(s.ops)) },
	"trigger": func(s *snapshot) []string { return s.jobNames() },
	"disable": func(s *snapshot) []string { return s.names() },
	"enable":  func(s *snapshot) []string { return sortedUnion(s.names(), trueKeys(s.ops.Disabled)) },
	"resign":  func(s *snapshot) []string { return sortedKeys(s.leases) },
	"groups":  groupNames,
	"drain":   func(s *snapshot) []string { return s.members() },
	"undrain": func(s *snapshot) []string { return sortedUnion(trueKeys(s.ops.Drained), s.members()) },
}

func groupNames(s *snapshot) []string {
	var out []string
	for _, g := range s.groups {
		out = append(out, g.Name)
	}
	return out
}

func sortedUnion(a, b []string) []string {
	out := slices.Concat(a, b)
	slices.Sort(out)
	return slices.Compact(out)
}

func commandNames() []string {
	var out []string
	for _, c := range commands {
		out = append(out, c.name)
	}
	return out
}

// flagNames lists the flags of fs as they are typed: -o, --name.
func flagNames(fs *flag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) {
		if len(f.Name) == 1 {
			out = append(out, "-"+f.Name)
		} else {
			out = append(out, "--"+f.Name)
		}
	})
	return out
}

// flagValues lists the values of a flag, for those that have few.
func flagValues(name string) []string {
	switch name {
	case "o", "output":
		return outputs
	}
	return nil
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
