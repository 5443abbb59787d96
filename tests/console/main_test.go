package console_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/goleak"

	"github.com/simba-go/simba/internal/plant"
)

// TestMain plants the bug named by $SIMBA_PLANT (see internal/plant) for the
// whole run, if any, and checks for leaked goroutines after the tests.
func TestMain(m *testing.M) {
	plant.ForRun()
	goleak.VerifyTestMain(m)
}

// testToken is the operations token of the tests.
const testToken = "test-token-0123456789abcdef"

// origin is where the tests reach the console when they serve it without a
// server (get).
const origin = "http://127.0.0.1:8642"

// get serves a GET of path.
func get(h http.Handler, path string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, origin+path, nil))
	return w
}
