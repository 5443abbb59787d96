package proc

// Guarantee is one sentence saying what this platform guarantees about the
// command's own children and further descendants, for `simba run --help`
// and the docs.
func Guarantee() string { return guarantee }
