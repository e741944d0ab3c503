package ocsf

import "testing"

func TestNowhereDropsWithoutMarshalling(t *testing.T) {
	// A nil event cannot be marshalled: Discard reports it, Nowhere does
	// not look at it.
	if err := Discard.Emit(nil); err == nil {
		t.Fatal("Discard accepted an event that does not marshal")
	}
	if err := Nowhere.Emit(nil); err != nil {
		t.Fatalf("Nowhere: %v", err)
	}
}
