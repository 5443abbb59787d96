package admin

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/simba-go/simba/internal/records"
)

// TestConvertCopiesEveryField: each conversion from a record copies every
// field to the field of the same name and JSON tag, so that the JSON of
// what Admin returns is that of the record, and a record's zero value
// converts to the zero value.
func TestConvertCopiesEveryField(t *testing.T) {
	t.Run("Status", func(t *testing.T) { checkConvert(t, statusOf) })
	t.Run("Holder", func(t *testing.T) { checkConvert(t, holderOf) })
	t.Run("Term", func(t *testing.T) { checkConvert(t, termOf) })
	t.Run("Run", func(t *testing.T) { checkConvert(t, runOf) })
	t.Run("Op", func(t *testing.T) { checkConvert(t, opOf) })
	t.Run("Health", func(t *testing.T) { checkConvert(t, healthOf) })
	t.Run("Renewal", func(t *testing.T) { checkConvert(t, renewalOf) })
	t.Run("AuditEntry", func(t *testing.T) { checkConvert(t, auditEntryOf) })
}

// TestConvertCopiesPointers: a converted value shares no memory with its
// record.
func TestConvertCopiesPointers(t *testing.T) {
	var r records.Status
	fill(t, reflect.ValueOf(&r).Elem(), new(int))
	st := statusOf(r)
	*r.LastRun.ExitCode++
	r.Holder.Member = "changed"
	r.Terms[0].Member = "changed"
	for k := range r.LastRun.Args {
		r.LastRun.Args[k] = "changed"
	}
	if *st.LastRun.ExitCode == *r.LastRun.ExitCode || st.Holder.Member == "changed" || st.Terms[0].Member == "changed" || slices.Contains(slices.Collect(maps.Values(st.LastRun.Args)), "changed") {
		t.Errorf("the converted status changed with its record: %+v", st)
	}
	var rop records.Op
	fill(t, reflect.ValueOf(&rop).Elem(), new(int))
	op := opOf(rop)
	for k := range rop.Args {
		rop.Args[k] = "changed"
	}
	if slices.Contains(slices.Collect(maps.Values(op.Args)), "changed") {
		t.Errorf("the converted operation changed with its record: %+v", op)
	}
}

// TestDocumentedAsStored: the words of Term.Ended are those the nodes
// write, and the numbers the documentation states (the bounds of Problem,
// of Status.Terms and Health.Renewals, the audit trail's retention) are
// those of the code.
func TestDocumentedAsStored(t *testing.T) {
	if EndedFailOver != records.EndedFailOver || EndedMoved != records.EndedMoved {
		t.Errorf("EndedFailOver %q, EndedMoved %q: want the records' %q and %q", EndedFailOver, EndedMoved, records.EndedFailOver, records.EndedMoved)
	}
	if maxProblemKey != 160 || maxProblemReason != 320 || maxProblemEcho != 48 {
		t.Errorf("Problem's bounds %d, %d, %d: its documentation says 160, 320, 48", maxProblemKey, maxProblemReason, maxProblemEcho)
	}
	if records.TermsLen != 32 || records.HealthLen != 16 {
		t.Errorf("TermsLen %d, HealthLen %d: Status.Terms and Health.Renewals say 32 and 16", records.TermsLen, records.HealthLen)
	}
	if records.AuditKeep != 1000 || records.AuditMaxAge != 30*24*time.Hour || pruneBatch != 100 {
		t.Errorf("AuditKeep %d, AuditMaxAge %v, pruneBatch %d: the package documentation says 1000, 30 days, 100", records.AuditKeep, records.AuditMaxAge, pruneBatch)
	}
}

// checkConvert checks conv on a record with every field set, each to a
// value of its own, and on the zero record.
func checkConvert[R, T any](t *testing.T, conv func(R) T) {
	t.Helper()
	rt, tt := reflect.TypeFor[R](), reflect.TypeFor[T]()
	if rt.NumField() != tt.NumField() {
		t.Errorf("%v has %d fields, %v %d", rt, rt.NumField(), tt, tt.NumField())
	}
	for i := range min(rt.NumField(), tt.NumField()) {
		rf, tf := rt.Field(i), tt.Field(i)
		if rf.Name != tf.Name || rf.Tag != tf.Tag {
			t.Errorf("field %d: %v.%s `%s`, %v.%s `%s`: want the same name and tag", i, rt, rf.Name, rf.Tag, tt, tf.Name, tf.Tag)
		}
	}
	var r R
	fill(t, reflect.ValueOf(&r).Elem(), new(int))
	want, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(conv(r))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("converted:\n%s\nwant the record's:\n%s", got, want)
	}
	var zero R
	if got := conv(zero); !reflect.ValueOf(got).IsZero() {
		t.Errorf("the zero record converts to %+v, want the zero value", got)
	}
}

// fill sets every field of v, recursively, to a value that is not zero and
// differs from those of the other fields (n counts them): pointers point,
// slices hold two elements.
func fill(t *testing.T, v reflect.Value, n *int) {
	t.Helper()
	*n++
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2025, 3, 4, 16, 0, *n, 0, time.UTC)))
			return
		}
		for i := range v.NumField() {
			fill(t, v.Field(i), n)
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), n)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range v.Len() {
			fill(t, v.Index(i), n)
		}
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(t, k, n)
			fill(t, e, n)
			v.SetMapIndex(k, e)
		}
	case reflect.String:
		v.SetString(fmt.Sprint("s", *n))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Bool:
		v.SetBool(true)
	default:
		t.Fatalf("fill: a field of kind %v: add it", v.Kind())
	}
}
