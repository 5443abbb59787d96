// Package termlog records, for the backends' fault tests, the terms that
// the tasks of several simba clients saw and the fenced writes they made
// to a register, for the checkers of internal/check. Only tests import
// it.
package termlog
