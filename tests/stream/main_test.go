package stream_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/plant"
)

func TestMain(m *testing.M) {
	plant.ForRun()
	goleak.VerifyTestMain(m)
}
