package mysqlbench_test

import (
	"io"
	"log"
	"testing"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/plant"
)

// TestMain plants the bug named by $SIMBA_PLANT (see internal/plant) for the
// whole run, if any, and checks for leaked goroutines after the tests. The
// driver's own log (a line per connection the faults break) is dropped.
func TestMain(m *testing.M) {
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	plant.ForRun()
	goleak.VerifyTestMain(m)
}
