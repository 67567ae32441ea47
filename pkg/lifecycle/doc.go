// Package lifecycle is the contact-in-campaign state machine: pure domain code, no
// NATS, no I/O. docs/lifecycle.md explains it; in short:
//
//   - A State is a set of facts, one per envelope id (what the lifecycle keeps of an
//     event: type, time, version, arrival, provider, and the few fields that carry
//     meaning). Merge is set union followed by a deterministic bound, so it is
//     commutative, associative and idempotent: the same events in any order, with any
//     duplicates, give the same State. Apply(s, env) = Merge(s, FromEvent(env)).
//   - Everything else is a function of the set (State.View): the status by explicit
//     precedence (unsubscribed > bounced > suppressed > opportunity > meeting_booked >
//     interested > replied > completed > opened > delivered > sent > enrolled), the
//     flags a campaign projection counts, the latest contact properties (an older
//     version never overwrites a newer one), the discrepancies (facts the transition
//     Table forbids, with the event, the state and why) and the Undecided pairs (equal
//     times, no versions: the projector asks the source of truth).
//   - Order comes from the event's time and version, never from arrival; arrival at the
//     gateway (receivedat, a field of the event) only tells an old sync replaying an
//     earlier state apart from history, for the Stale rule.
//   - Keys says which lifecycles an event feeds: its contact in its campaign, and the
//     contact itself for facts without a campaign or about the contact everywhere.
//     Effective(campaign, contact) is the campaign view that knows both.
package lifecycle
