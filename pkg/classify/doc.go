// Package classify labels human replies to outbound sales (e-mail replies from
// Instantly/Smartlead, WhatsApp/Instagram/Messenger messages) so that the rest
// of Exacto can act on them exactly once. It is pure domain code: no NATS, no
// HTTP. It never books or sends anything; a Result only suggests an action.
//
// The taxonomy (Labels), in English, Spanish and Portuguese:
//
//	label                meaning                                              suggested action
//	-------------------  ---------------------------------------------------  --------------------------
//	interested           positive, no concrete ask yet ("sounds good")        stop_and_route_to_owner
//	meeting_request      wants a call/meeting/demo or proposes a time         book_meeting_suggestion
//	information_request  asks about price, features, integrations, material  stop_and_route_to_owner
//	referral             points to another person ("talk to maria@…")         stop_and_contact_referral
//	follow_up_later      a timing objection ("not now, ping me in Q3")        stop_and_follow_up_later
//	not_interested       declines ("not interested", "no me interesa")        stop_sequence
//	unsubscribe_request  asks to be removed / stop contact (STOP, baja, LGPD) suppress
//	out_of_office        person away for a while, usually with a return date  pause_until_return
//	auto_reply           machine acknowledgement (ticket, shared inbox)       none
//	bounce_notice        delivery failure (DSN, "Undeliverable:")             suppress
//	wrong_person         not the buyer / left the company, no pointer         stop_sequence
//	unclear              nothing decisive ("ok", "?", "who is this")          human_review
//
// Any label whose confidence is below the threshold (WithThreshold, default
// DefaultThreshold) gets the action human_review instead.
//
// How the shipped classifier decides. Strip first removes quoted history,
// signatures, mobile footers and disclaimers. The text is folded (lowercase,
// accents and apostrophes removed) and tokenized; weighted lexicon phrases
// (lexicon.go) are matched longest first, each consuming its words, so "not
// interested" is never also "interested". A positive phrase preceded by a
// negator in the same sentence ("no estamos interesados") counts for
// not_interested. Precedence is safety first: bounce_notice (looked for in the
// raw text, since a DSN quotes the original message), then
// unsubscribe_request, then out_of_office/auto_reply if they outweigh every
// human label, then the best-scoring human label, ties going to the more
// cautious label. Confidence grows with the winning weight and shrinks with a
// close runner-up. The Evidence is the matched phrases, folded. A follow_up_later
// and an out_of_office carry When: the time the reply names ("q3", "next month",
// "monday"; an out-of-office's after "until" and its like), in its words. An
// unsubscribe that also points to someone keeps that in Also ("referral: lee@…"):
// the unsubscribe decides the action, the referral is not lost. A reply in French
// or German is recognised and said to be so (unclear, human_review); no lexicon
// guesses at it.
//
// Classifier is an interface so that an external model can replace or back up
// the rules later; it must return the same Labels.
package classify
