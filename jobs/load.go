package jobs

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/simba-go/simba"
)

// EnabledEnv is the environment variable that turns every job on or off,
// whatever the configuration says: "false" (or 0, f, F, FALSE, False)
// disables them, "true" (or 1, t, T, TRUE, True) enables them even when the
// configuration has scheduling.enabled: false. Any other value is an error.
// Its name is simba.scheduling.enabled written as an environment variable,
// as Spring Boot's relaxed binding writes property names.
const EnabledEnv = "SIMBA_SCHEDULING_ENABLED"

// Load reads a configuration in the given format from r (see the package
// documentation for the layout), resolves its placeholders and checks it on
// its own, without handlers ([Validate] and [Run] check it against a
// [Registry]). It reports every problem at once, as a [*ConfigError] of
// [*FieldError] values that give the line, the job and the key.
//
// Placeholders are resolved from the environment (see [WithLookupEnv]) and
// the file's properties. Given [WithRegistry], Load checks the jobs'
// handlers too, in the same round, and logs the [Warnings] to the logger of
// [WithLogger]; it uses no other option.
// An empty input is an empty configuration; a nil r is an error matching
// [ErrInvalidValue].
func Load(r io.Reader, format Format, opts ...Option) (Config, error) {
	if r == nil {
		return Config{}, fmt.Errorf("%w: nil reader", ErrInvalidValue)
	}
	o, err := buildOptions(opts)
	if err != nil {
		return Config{}, err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return Config{}, fmt.Errorf("%sread configuration: %w", prefix, err)
	}
	return load(data, format, "", o)
}

// LoadFile reads the configuration in the file at path, as [Load] does, in
// the format its extension says: .yaml or .yml for YAML, .json for JSON.
// Positions in errors are "path:line".
func LoadFile(path string, opts ...Option) (Config, error) {
	o, err := buildOptions(opts)
	if err != nil {
		return Config{}, err
	}
	var format Format
	switch strings.ToLower(filepath.Ext(path)) {
	case ".yaml", ".yml":
		format = YAML
	case ".json":
		format = JSON
	default:
		return Config{}, fmt.Errorf("%w: %s: unknown format (want a .yaml, .yml or .json file)", ErrSyntax, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("%sread configuration: %w", prefix, err)
	}
	return load(data, format, path, o)
}

func load(data []byte, format Format, source string, o options) (Config, error) {
	var (
		t   *tree
		err error
	)
	switch format {
	case YAML:
		t, err = parseYAML(data)
	case JSON:
		t, err = parseJSON(data)
	default:
		return Config{}, fmt.Errorf("%w: unknown format %v", ErrInvalidValue, format)
	}
	l := &loader{source: source, env: o.lookupEnv, props: map[string]string{}}
	if err != nil {
		l.p.add(position{text: source}, "", "", "", err)
		return Config{}, l.p.err()
	}
	l.x = &expander{lookup: l.lookupName}
	l.origin = &origin{lines: map[fieldRef]position{}, reported: map[fieldRef]bool{}, names: map[fieldRef]string{}}
	cfg := l.config(t)
	cfg.origin = l.origin
	checkConfig(&l.p, cfg)
	var hs handlers
	if o.registry != nil {
		hs = o.registry.snapshot()
		checkHandlers(&l.p, hs, cfg)
	}
	if err := l.p.err(); err != nil {
		return Config{}, err
	}
	if o.registry != nil {
		for _, w := range warnings(hs, cfg) {
			o.logger.Warn("job configuration", "warning", w.Error())
		}
	}
	return cfg, nil
}

// Keys of the layout.
var (
	topKeys         = []string{"scheduling", "properties", "scheduled", "partitioned", "notify"}
	schedulingKeys  = []string{"enabled"}
	policyKeys      = []string{retryKey, timeoutKey, overlapKey, maxConcurrentKey, catchUpKey, pauseAfterKey, progressKey, notifyKey}
	scheduledKeys   = append([]string{"name", "handler", "fixedDelay", "fixedRate", "cron", "initialDelay", "misfire", "command"}, policyKeys...)
	partitionedKeys = append([]string{"group", "handler", "partitions", "fixedDelay", "fixedRate", "cron", "initialDelay", "misfire", "shardingItemParameters", "command"}, policyKeys...)
)

// loader turns a tree into a Config, collecting problems.
type loader struct {
	source string
	env    func(string) (string, bool)
	props  map[string]string
	x      *expander
	origin *origin
	p      problems
}

func (l *loader) pos(line int) position {
	if l.source != "" {
		return position{fmt.Sprintf("%s:%d", l.source, line), line}
	}
	return position{fmt.Sprintf("line %d", line), line}
}

// lookupName resolves a placeholder's name: from the environment, first as
// written and then in its relaxed form (upper case, "." and "-" as "_"),
// then from the properties.
func (l *loader) lookupName(name string) (string, bool) {
	if v, ok := l.env(name); ok {
		return v, true
	}
	if relaxed := envName(name); relaxed != name {
		if v, ok := l.env(relaxed); ok {
			return v, true
		}
	}
	v, ok := l.props[name]
	return v, ok
}

// envName is the relaxed environment name of a property: "app.region-name"
// is APP_REGION_NAME.
func envName(name string) string {
	return strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(name))
}

func (l *loader) config(t *tree) Config {
	var cfg Config
	switch t.kind {
	case nullNode:
		return cfg
	case mapNode:
	default:
		l.p.add(l.pos(t.line), "", "", "", fmt.Errorf("%w: the top level must be a map with the keys %s, not %v", ErrSyntax, strings.Join(topKeys, ", "), t.kind))
		return cfg
	}
	t, report := l.relax(t, topKeys, "")
	report("", "")
	if props := t.get("properties"); props != nil && props.kind != nullNode {
		l.properties(props, "")
	}
	if s := t.get("scheduling"); s != nil && s.kind != nullNode {
		if s.kind != mapNode {
			l.p.add(l.pos(s.line), "", "", "scheduling", fmt.Errorf("%w: want a map with the key enabled, not %v", ErrSyntax, s.kind))
		} else {
			var report func(kind, name string)
			s, report = l.relax(s, schedulingKeys, "scheduling.")
			report("", "")
			if e := s.get("enabled"); e != nil {
				if v, ok := l.scalar(e, "", "", "scheduling.enabled"); ok {
					b, err := strconv.ParseBool(v)
					if err != nil {
						l.p.add(l.pos(e.line), "", "", "scheduling.enabled", fmt.Errorf("%w: %s is not true or false", ErrInvalidValue, quote(v)))
					}
					cfg.Disabled = err == nil && !b
				}
			}
		}
	}
	cfg.Notify = section{l: l, t: t}.notify()
	for i, item := range l.list(t.get("scheduled"), "scheduled") {
		cfg.Scheduled = append(cfg.Scheduled, l.scheduled(i, item))
	}
	for i, item := range l.list(t.get("partitioned"), "partitioned") {
		cfg.Partitioned = append(cfg.Partitioned, l.partitioned(i, item))
	}
	return cfg
}

// properties flattens the properties map into dotted names: {app: {region:
// eu}} is app.region; list items are name[i].
func (l *loader) properties(t *tree, name string) {
	switch t.kind {
	case mapNode:
		for i, k := range t.keys {
			sub := k.value
			if name != "" {
				sub = name + "." + sub
			}
			l.properties(t.vals[i], sub)
		}
		return
	case listNode:
		for i, item := range t.items {
			l.properties(item, fmt.Sprintf("%s[%d]", name, i))
		}
		return
	}
	if name == "" {
		l.p.add(l.pos(t.line), "", "", "properties", fmt.Errorf("%w: want a map, not %v", ErrSyntax, t.kind))
		return
	}
	if _, dup := l.props[name]; dup {
		l.p.add(l.pos(t.line), "", "", "properties", fmt.Errorf("%w: property %s given twice", ErrSyntax, quote(name)))
		return
	}
	l.props[name] = t.value // "" for null
}

// list returns the items of a list of jobs under key.
func (l *loader) list(t *tree, key string) []*tree {
	if t == nil || t.kind == nullNode {
		return nil
	}
	if t.kind != listNode {
		l.p.add(l.pos(t.line), "", "", key, fmt.Errorf("%w: want a list of jobs, not %v", ErrSyntax, t.kind))
		return nil
	}
	return t.items
}

// relax reports the keys of map t that are not in known, in any of the
// spellings Spring Boot's relaxed binding accepts (fixedDelay, fixed-delay,
// fixed_delay, FIXED_DELAY), and one key given in two spellings. It returns
// t with each key in its known spelling, the keys reported left out; values
// and lines are t's. The problems are added by the returned function, once
// the name of the job they belong to is known.
func (l *loader) relax(t *tree, known []string, keyPrefix string) (*tree, func(kind, name string)) {
	type keyProblem struct {
		pos position
		key string
		err error
	}
	var bad []keyProblem
	out := &tree{kind: mapNode, line: t.line}
	first := map[string]*tree{} // known spelling → the key as first written
	for i, k := range t.keys {
		want, ok := knownKey(known, k.value)
		if !ok {
			bad = append(bad, keyProblem{l.pos(k.line), keyPrefix + k.value, fmt.Errorf("%w: unknown key (known keys: %s)", ErrSyntax, strings.Join(known, ", "))})
			continue
		}
		if prev, dup := first[want]; dup {
			bad = append(bad, keyProblem{l.pos(k.line), keyPrefix + want, fmt.Errorf("%w: given twice, as %s (line %d) and as %s (line %d)", ErrSyntax, clip(prev.value), prev.line, clip(k.value), k.line)})
			continue
		}
		first[want] = k
		out.keys = append(out.keys, &tree{kind: scalarNode, value: want, line: k.line})
		out.vals = append(out.vals, t.vals[i])
	}
	return out, func(kind, name string) {
		for _, b := range bad {
			l.p.add(b.pos, kind, name, b.key, b.err)
		}
	}
}

// knownKey returns the known spelling of key, if it is one of known in a
// relaxed spelling.
func knownKey(known []string, key string) (string, bool) {
	if slices.Contains(known, key) {
		return key, true
	}
	for _, want := range known {
		if normalKey(want) == normalKey(key) {
			return want, true
		}
	}
	return "", false
}

// normalKey folds the spellings of a key Spring's relaxed binding accepts:
// fixedDelay, fixed-delay, fixed_delay, FIXED_DELAY.
func normalKey(s string) string {
	return strings.ToLower(strings.NewReplacer("-", "", "_", "").Replace(s))
}

// scalar returns the expanded text of a single value; it reports other
// shapes and placeholder problems.
func (l *loader) scalar(t *tree, kind, name, key string) (string, bool) {
	switch t.kind {
	case nullNode:
		return "", true
	case scalarNode:
	default:
		l.p.add(l.pos(t.line), kind, name, key, fmt.Errorf("%w: want a single value, not %v", ErrSyntax, t.kind))
		return "", false
	}
	v, err := l.x.expand(t.value)
	if err != nil {
		l.p.add(l.pos(t.line), kind, name, key, err)
		return "", false
	}
	return v, true
}

// job reads the fields of one job's map.
type job struct {
	l    *loader
	t    *tree
	kind string
	i    int
	name string // label for errors
}

// begin checks the shape of job i and reads its name key.
func (l *loader) begin(i int, t *tree, kind, nameKey string, known []string) (*job, string) {
	j := &job{l: l, t: t, kind: kind, i: i, name: "#" + strconv.Itoa(i+1)}
	if t.kind != mapNode {
		l.p.add(l.pos(t.line), kind, j.name, "", fmt.Errorf("%w: want a map, not %v", ErrSyntax, t.kind))
		j.t = &tree{kind: mapNode, line: t.line}
		j.reported(nameKey)
		return j, ""
	}
	l.origin.lines[fieldRef{kind, i, ""}] = l.pos(t.line)
	t, report := l.relax(t, known, "")
	j.t = t
	name := ""
	if n := t.get(nameKey); n != nil {
		l.origin.lines[fieldRef{kind, i, nameKey}] = l.pos(n.line)
		if v, ok := l.scalar(n, kind, j.name, nameKey); ok {
			name = v
		} else {
			j.reported(nameKey)
		}
	}
	if name != "" {
		j.name = name
	}
	l.origin.names[fieldRef{kind, i, ""}] = name
	report(kind, j.name)
	return j, name
}

func (j *job) reported(key string) { j.l.origin.reported[fieldRef{j.kind, j.i, key}] = true }

func (j *job) fail(t *tree, key string, err error) {
	j.reported(key)
	j.l.p.add(j.l.pos(t.line), j.kind, j.name, key, err)
}

// str returns the expanded value of key, "" when absent.
func (j *job) str(key string) (string, *tree, bool) {
	t := j.t.get(key)
	if t == nil {
		return "", nil, false
	}
	j.l.origin.lines[fieldRef{j.kind, j.i, key}] = j.l.pos(t.line)
	v, ok := j.l.scalar(t, j.kind, j.name, key)
	if !ok {
		j.reported(key)
	}
	return v, t, ok
}

// duration returns the duration under key, 0 when absent or bad. An explicit
// zero fixedDelay or fixedRate is reported here: in a Config, zero means
// unset.
func (j *job) duration(key string) time.Duration {
	v, t, ok := j.str(key)
	if t == nil {
		return 0
	}
	if ok {
		d, err := ParseDuration(v)
		switch {
		case err != nil:
			j.fail(t, key, err)
		case d == 0 && key != "initialDelay":
			j.fail(t, key, fmt.Errorf("%w: must be positive, got %s", ErrDuration, quote(v)))
		default:
			return d
		}
	}
	if key != "initialDelay" {
		j.reported(timingKey) // whether the other one is set is moot now
	}
	return 0
}

// cron returns the cron expression under key cron, "" when absent or bad;
// checkConfig checks it.
func (j *job) cron() string {
	v, t, ok := j.str("cron")
	if t != nil && !ok {
		j.reported(timingKey)
	}
	return strings.TrimSpace(v)
}

// misfire returns the misfire policy under key misfire: skip or run-once
// in any relaxed spelling (run_once, runOnce, RUN_ONCE), or ElasticJob's
// boolean (true: run once, false: skip).
func (j *job) misfire() simba.MisfirePolicy {
	v, t, ok := j.str("misfire")
	if t == nil || !ok {
		return simba.MisfireSkip
	}
	switch normalKey(strings.TrimSpace(v)) {
	case "", "skip", "false":
		return simba.MisfireSkip
	case "runonce", "true":
		return simba.MisfireRunOnce
	}
	j.fail(t, "misfire", fmt.Errorf("%w: %s is not skip or run-once (or ElasticJob's true or false)", ErrInvalidValue, quote(v)))
	return simba.MisfireSkip
}

func (l *loader) scheduled(i int, t *tree) ScheduledJob {
	j, name := l.begin(i, t, kindScheduled, "name", scheduledKeys)
	handler, _, _ := j.str("handler")
	sj := ScheduledJob{
		Name:         name,
		Handler:      handler,
		FixedDelay:   j.duration("fixedDelay"),
		FixedRate:    j.duration("fixedRate"),
		Cron:         j.cron(),
		InitialDelay: j.duration("initialDelay"),
		Misfire:      j.misfire(),
		Command:      j.command(),
	}
	p := j.policies()
	sj.Retry, sj.Timeout, sj.Overlap, sj.MaxConcurrent = p.retry, p.timeout, p.overlap, p.maxConcurrent
	sj.CatchUpWindow, sj.PauseAfterFailures, sj.ProgressTimeout = p.catchUp, p.pauseAfter, p.progress
	sj.Notify = j.sec().notify()
	return sj
}

// policies reads the keys of a job's policies; checkConfig checks their
// ranges.
func (j *job) policies() policies {
	s := j.sec()
	return policies{
		retry:         s.retry(),
		timeout:       s.duration(timeoutKey),
		overlap:       s.overlap(),
		maxConcurrent: s.integer(maxConcurrentKey),
		catchUp:       s.duration(catchUpKey),
		pauseAfter:    s.integer(pauseAfterKey),
		progress:      s.duration(progressKey),
	}
}

func (l *loader) partitioned(i int, t *tree) PartitionedJob {
	j, group := l.begin(i, t, kindPartitioned, "group", partitionedKeys)
	handler, _, _ := j.str("handler")
	pj := PartitionedJob{
		Group:        group,
		Handler:      handler,
		FixedDelay:   j.duration("fixedDelay"),
		FixedRate:    j.duration("fixedRate"),
		Cron:         j.cron(),
		InitialDelay: j.duration("initialDelay"),
		Misfire:      j.misfire(),
	}
	switch v, pt, ok := j.str("partitions"); {
	case pt == nil:
		j.fail(t, "partitions", fmt.Errorf("%w: missing", ErrInvalidValue))
	case ok:
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			j.fail(pt, "partitions", fmt.Errorf("%w: %s is not a whole number", ErrInvalidValue, quote(v)))
		}
		pj.Partitions = n
	}
	pj.Params = j.params()
	pj.Command = j.command()
	p := j.policies()
	pj.Retry, pj.Timeout, pj.Overlap, pj.MaxConcurrent = p.retry, p.timeout, p.overlap, p.maxConcurrent
	pj.CatchUpWindow, pj.PauseAfterFailures, pj.ProgressTimeout = p.catchUp, p.pauseAfter, p.progress
	pj.Notify = j.sec().notify()
	return pj
}

// command reads the key command: a list of strings (block or flow), the
// program and its arguments, each expanded. It returns nil when the key is
// absent or its value is refused; checkConfig checks the rest.
func (j *job) command() []string {
	t := j.t.get(commandKey)
	if t == nil {
		return nil
	}
	// Problems of the whole list are on the key's line: a block list starts
	// on the next.
	k := j.t.getKey(commandKey)
	j.l.origin.lines[fieldRef{j.kind, j.i, commandKey}] = j.l.pos(k.line)
	switch t.kind {
	case listNode:
	case scalarNode:
		j.fail(k, commandKey, fmt.Errorf("%w: want a list of strings, such as %s, not the single value %s (a command is not split at spaces)", ErrSyntax, commandExample, quote(t.value)))
		return nil
	default:
		j.fail(k, commandKey, fmt.Errorf("%w: want a list of strings, such as %s, not %v", ErrSyntax, commandExample, t.kind))
		return nil
	}
	if len(t.items) == 0 {
		j.fail(k, commandKey, fmt.Errorf("%w: an empty list; want the program and its arguments, such as %s", ErrInvalidValue, commandExample))
		return nil
	}
	cmd := make([]string, 0, len(t.items))
	ok := true
	for n, item := range t.items {
		switch item.kind {
		case scalarNode:
		case nullNode:
			j.fail(item, commandKey, fmt.Errorf("%w: element %d is null; quote it (\"null\", \"~\") or write \"\" for an empty argument", ErrSyntax, n+1))
			ok = false
			continue
		default:
			j.fail(item, commandKey, fmt.Errorf("%w: element %d: want a single value, not %v", ErrSyntax, n+1, item.kind))
			ok = false
			continue
		}
		v, err := j.l.x.expand(item.value)
		if err != nil {
			j.fail(item, commandKey, elementError(n, err))
			ok = false
			continue
		}
		cmd = append(cmd, v)
	}
	if !ok {
		return nil
	}
	if strings.TrimSpace(cmd[0]) == "" {
		j.fail(t.items[0], commandKey, fmt.Errorf("%w: the program (element 1) is %s; want the program and its arguments, such as %s", ErrInvalidValue, blankOrEmpty(cmd[0]), commandExample))
		return nil
	}
	return cmd
}

// elementError is err, a placeholder's, about element n of a list:
// "bad placeholder: element 2: ${X} is not set ...".
func elementError(n int, err error) error {
	msg := strings.TrimPrefix(err.Error(), prefix)
	head := strings.TrimPrefix(ErrPlaceholder.Error(), prefix) + ": "
	if rest, ok := strings.CutPrefix(msg, head); ok {
		msg = head + fmt.Sprintf("element %d: ", n+1) + rest
	} else {
		msg = fmt.Sprintf("element %d: ", n+1) + msg
	}
	return &shownError{msg: prefix + msg, err: err}
}

// params reads shardingItemParameters: a string "0=Beijing,1=Shanghai" or a
// map {0: Beijing, 1: Shanghai}.
func (j *job) params() map[int]string {
	const key = "shardingItemParameters"
	t := j.t.get(key)
	if t == nil || t.kind == nullNode {
		return nil
	}
	j.l.origin.lines[fieldRef{j.kind, j.i, key}] = j.l.pos(t.line)
	if t.kind != mapNode {
		v, ok := j.l.scalar(t, j.kind, j.name, key)
		if !ok {
			j.reported(key)
			return nil
		}
		m, err := ParseShardingItemParameters(v)
		if err != nil {
			j.fail(t, key, err)
		}
		return m
	}
	m := map[int]string{}
	for i, k := range t.keys {
		n, err := strconv.Atoi(k.value)
		if err != nil || n < 0 {
			j.fail(k, key, fmt.Errorf("%w: %s is not a partition number", ErrInvalidValue, quote(k.value)))
			continue
		}
		if v, ok := j.l.scalar(t.vals[i], j.kind, j.name, key); ok {
			m[n] = v
		} else {
			j.reported(key)
		}
	}
	return m
}

// ParseShardingItemParameters parses ElasticJob's sharding-item parameters:
// comma-separated "partition=label" items, such as "0=Beijing,1=Shanghai".
// White space around items, numbers and labels is ignored, and so are empty
// items; a label may contain "=" but not ",". A partition given twice, an
// item without "=" and a partition that is not a whole number ≥ 0 are
// errors wrapping [ErrInvalidValue].
func ParseShardingItemParameters(s string) (map[int]string, error) {
	m := map[int]string{}
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		num, label, ok := strings.Cut(item, "=")
		if !ok {
			return nil, fmt.Errorf("%w: %s is not partition=label", ErrInvalidValue, quote(item))
		}
		num = strings.TrimSpace(num)
		n, err := strconv.Atoi(num)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: %s is not a partition number", ErrInvalidValue, quote(num))
		}
		if _, dup := m[n]; dup {
			return nil, fmt.Errorf("%w: partition %d given twice", ErrInvalidValue, n)
		}
		m[n] = strings.TrimSpace(label)
	}
	return m, nil
}
