package sandbox

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
)

func TestControl(t *testing.T) {
	s := Start(t)
	post := func(path, body string) int {
		t.Helper()
		resp, err := http.Post(s.URL+path, "application/json", bytes.NewBufferString(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := post(ControlLeads, `{"campaign":"c1","emails":["a@x.example","b@x.example"]}`); c != 200 {
		t.Fatalf("leads: %d", c)
	}
	if c := post(ControlFaults, `{"route":"hubspot","fault":{"down_for":"10s"}}`); c != 200 {
		t.Fatalf("faults: %d", c)
	}
	if c := post(ControlFaults, `{"route":"nowhere","fault":{"status":500}}`); c != 400 {
		t.Fatalf("unknown route: %d", c)
	}
	if c := post(ControlFaults, `{"route":"hubspot.notes.create","fault":{"down_for":"soon"}}`); c != 400 {
		t.Fatalf("bad duration: %d", c)
	}
	s.mu.Lock()
	n := len(s.faults)
	s.mu.Unlock()
	if n != 16 { // 7 object routes, 7 of properties, batches and associations, the deal and meeting searches
		t.Fatalf("hubspot faults: %d routes, want 16", n)
	}
	req, _ := http.NewRequest(http.MethodDelete, s.URL+ControlFaults, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("delete: %v %v", resp, err)
	}
	resp.Body.Close()
	s.mu.Lock()
	n = len(s.faults)
	s.mu.Unlock()
	if n != 0 {
		t.Fatalf("faults left: %d", n)
	}

	s.mu.Lock()
	s.inst.stops = append(s.inst.stops, InstantlyStop{Email: "a@x.example", Campaign: "c1"})
	s.inst.blocklist = append(s.inst.blocklist, blockEntry{Value: "a@x.example"})
	s.mu.Unlock()
	cid := s.AddContact("a@x.example", nil)
	s.AddNoteFor(cid, map[string]string{NoteExternalIDProperty: "ev-1"})
	resp, err = http.Get(s.URL + ControlState + "?email=A@x.example&note=ev-1&note=ev-2")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var a ControlStateAnswer
	if err := json.NewDecoder(resp.Body).Decode(&a); err != nil {
		t.Fatal(err)
	}
	if a.Stops != 1 || !a.Blocklisted || len(a.Leads) != 1 || a.Leads[0].Campaign != "c1" || a.Notes != 1 ||
		a.NoteIDs["ev-1"] != 1 || a.NoteIDs["ev-2"] != 0 {
		t.Fatalf("state: %+v", a)
	}
}
