package option

import "fmt"

// Apply applies opts to cfg in order. It returns the error of the first
// option that refuses its value, as the option returned it, or an error
// prefixed with pkg (the backend's prefix, "simba/etcd") for a nil option;
// the options after it are not applied.
func Apply[C any, O ~func(*C) error](pkg string, cfg *C, opts []O) error {
	for i, o := range opts {
		if o == nil {
			return fmt.Errorf("%s: nil option (option %d of %d)", pkg, i+1, len(opts))
		}
		if err := o(cfg); err != nil {
			return err
		}
	}
	return nil
}
