package frame

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// The stored form never changes: records written by earlier versions
// must decode.
func TestStoredFormIsFixed(t *testing.T) {
	got := Encode(0x0102030405060708, []byte("v"))
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 'v'}
	if !bytes.Equal(got, want) {
		t.Fatalf("Encode: %v, want %v", got, want)
	}
	r, bad := Decode("k", want)
	if bad != nil || r.Key != "k" || r.Token != 0x0102030405060708 || string(r.Value) != "v" || r.Version != 0 {
		t.Errorf("Decode: %+v, %v", r, bad)
	}
	if r, _ := Decode("k", Encode(9, nil)); r.Value == nil || len(r.Value) != 0 {
		t.Errorf("Decode of an empty value: %#v, want an empty, non-nil value", r.Value)
	}
}

// Decode copies the value: the caller may reuse what it read.
func TestDecodeCopies(t *testing.T) {
	stored := Encode(1, []byte("abc"))
	r, _ := Decode("k", stored)
	stored[TokenLen] = 'X'
	if string(r.Value) != "abc" {
		t.Errorf("the record's value changed with the stored bytes: %q", r.Value)
	}
}

func TestDecodeTooShort(t *testing.T) {
	for _, stored := range [][]byte{nil, {}, []byte("garbage")} {
		_, bad := Decode("k", stored)
		if bad == nil {
			t.Errorf("Decode(%q) accepted a value shorter than the token", stored)
			continue
		}
		if bad.Key != "k" || !strings.Contains(bad.Reason, strconv.Quote(string(stored))+" of "+strconv.Itoa(len(stored))+" bytes") {
			t.Errorf("Decode(%q): %+v", stored, bad)
		}
	}
}

// A stored token is at most t exactly when the stored value is less than
// Encode(t+1, nil), byte by byte: what a store that compares values
// compares.
func TestByteOrderFollowsTokens(t *testing.T) {
	tokens := []uint64{0, 1, 255, 256, 1 << 32, 1<<63 - 2}
	for _, stored := range tokens {
		for _, fence := range tokens {
			s := Encode(stored, []byte("value"))
			less := bytes.Compare(s, Encode(fence+1, nil)) < 0
			if less != (stored <= fence) {
				t.Errorf("token %d, fence %d: stored value less than the bound %v", stored, fence, less)
			}
		}
	}
}

func TestQuote(t *testing.T) {
	if got := Quote([]byte("a\x00")); got != `"a\x00"` {
		t.Errorf("Quote: %s", got)
	}
	long := bytes.Repeat([]byte("x"), MaxQuoted+1)
	if got, want := Quote(long), strconv.Quote(strings.Repeat("x", MaxQuoted))+"…"; got != want {
		t.Errorf("Quote of %d bytes: %s, want %s", len(long), got, want)
	}
}

// FuzzDecode: any stored bytes decode or are reported malformed, never a
// panic; what decodes encodes back to the same bytes; the quote of any
// bytes unquotes to their start.
func FuzzDecode(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("garbage"))
	f.Add(Encode(0, nil))
	f.Add(Encode(42, []byte("value")))
	f.Add(append(Encode(1<<63, nil), bytes.Repeat([]byte{0xff}, 40)...))
	f.Fuzz(func(t *testing.T, stored []byte) {
		r, bad := Decode("k", stored)
		token, ok := Token(stored)
		switch {
		case (bad == nil) != ok:
			t.Fatalf("Decode and Token disagree on %q: %v, %v", stored, bad, ok)
		case bad == nil && (r.Token != token || !bytes.Equal(Encode(r.Token, r.Value), stored)):
			t.Fatalf("%q decodes to %+v, which encodes to %q", stored, r, Encode(r.Token, r.Value))
		case bad != nil && (len(stored) >= TokenLen || bad.Key != "k" || bad.Reason == ""):
			t.Fatalf("%q reported malformed: %+v", stored, bad)
		}
		q := strings.TrimSuffix(Quote(stored), "…")
		s, err := strconv.Unquote(q)
		if err != nil || !strings.HasPrefix(string(stored), s) || len(s) > MaxQuoted {
			t.Fatalf("Quote(%q) = %s: unquotes to %q, %v", stored, Quote(stored), s, err)
		}
	})
}
