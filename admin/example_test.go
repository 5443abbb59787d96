package admin_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/simba-go/simba/admin"
	"github.com/simba-go/simba/backend/memory"
)

// An Admin reads without a session and keeps an audit trail of its
// operations.
func ExampleAdmin_Audit() {
	ctx := context.Background()
	b := memory.New()
	defer b.Close()
	a, err := admin.Open(ctx, b.Node("ops"), admin.WithOperator("alice@h1"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer a.Close()
	if _, err := a.Snapshot(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("sessions after reading:", len(b.Sessions()))

	_ = a.Disable(ctx, "billing", "maintenance")
	_ = a.As("bob@h2").Enable(ctx, "billing", "done")
	_ = a.Enable(ctx, "billing", "again")

	entries, _, _ := a.Audit(ctx, admin.AuditFilter{Name: "billing"})
	for _, e := range entries { // newest first
		change, _, _ := strings.Cut(e.Change, " since ")
		fmt.Printf("%s by %s (%s), changed %v: %s\n", e.Op, e.By, e.Reason, e.Changed, change)
	}
	// Output:
	// sessions after reading: 0
	// enable by alice@h1 (again), changed false: enable of what was not disabled: nothing changed
	// enable by bob@h2 (done), changed true: enabled; was disabled by alice@h1
	// disable by alice@h1 (maintenance), changed true: disabled; was enabled
}
