package kubernetes

// SetBeforeFencedWrite sets the hook run between the read of a lease name
// object and a record write to it, and returns a function restoring none.
func SetBeforeFencedWrite(f func()) (restore func()) {
	beforeFencedWrite = f
	return func() { beforeFencedWrite = nil }
}
