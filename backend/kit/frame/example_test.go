package frame_test

import (
	"fmt"

	"github.com/simba-go/simba/backend/kit/frame"
)

func Example() {
	stored := frame.Encode(42, []byte("ready"))
	fmt.Printf("%x\n", stored)

	r, bad := frame.Decode("status/a", stored)
	fmt.Println(r.Key, r.Token, string(r.Value), bad == nil)

	// A value the backend did not write (too short to hold a token).
	_, bad = frame.Decode("status/b", []byte("garbage"))
	fmt.Println(bad.Reason)
	// Output:
	// 000000000000002a7265616479
	// status/a 42 ready true
	// value "garbage" of 7 bytes, shorter than the 8-byte token in front of every record
}
