package console_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend/memory"
	"github.com/simba-go/simba/console"
)

// A read-only console on the memory backend, asked for its elections page
// as a browser would. The simba command serves it with an http.Server on
// console.DefaultAddr.
func ExampleNew() {
	b := memory.New()
	defer b.Close()
	a, err := admin.Open(context.Background(), b.Node("console"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	c, err := console.New(a, console.WithReadOnly(true))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()

	w := httptest.NewRecorder()
	c.ServeHTTP(w, httptest.NewRequest("GET", "http://"+console.DefaultAddr+"/elections", nil))
	fmt.Println(w.Code, w.Header().Get("Content-Type"))
	// Output: 200 text/html; charset=utf-8
}

// Without a token, a console that may operate is refused.
func ExampleNew_noToken() {
	b := memory.New()
	defer b.Close()
	a, err := admin.Open(context.Background(), b.Node("console"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	_, err = console.New(a)
	fmt.Println(err)
	// Output: simba/console: operations need a token: give WithToken or WithOperators, or WithReadOnly(true)
}
