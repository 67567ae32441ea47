package classify

import (
	"regexp"
	"strings"
)

var (
	// "On Mon, 3 Feb 2025 at 10:02, Ana <ana@x.com> wrote:" and its es/pt/fr/de
	// siblings; Gmail wraps long headers, so "wrote:" may sit on the next line.
	replyHeaderStart = regexp.MustCompile(`(?i)^(on|el|em|le|am)\s`)
	replyHeaderEnd   = regexp.MustCompile(`(?i)(wrote|escribió|escribio|escreveu|a écrit|schrieb)\s*:?\s*$`)
	// Outlook/Apple separators that open a forwarded or original message.
	separator = regexp.MustCompile(`(?i)^-{2,}\s*(original message|mensaje original|mensagem original|forwarded message|mensaje reenviado|mensagem encaminhada|mensaje de respuesta)\s*-{2,}$|^_{5,}$`)
	// Outlook header block: "From: …" followed closely by "Sent:" / "Date:" …
	headerFrom = regexp.MustCompile(`(?i)^\*?(from|de|von)\s*:\*?\s*\S`)
	headerNext = regexp.MustCompile(`(?i)^\*?(sent|date|to|subject|enviado|enviada|fecha|data|para|asunto|assunto|cc)(\s+(el|em))?\s*:`)
	// Mobile client footers.
	mobileFooter = regexp.MustCompile(`(?i)^(sent from (my )?|sent via |enviado desde (mi )?|enviado do (meu )?|enviado de (meu |mi )?|get outlook for |obtener outlook para |baixe o outlook|descargue outlook)`)
	// Legal disclaimers often contain "if you are not the intended recipient",
	// which would otherwise read like wrong_person.
	disclaimer = regexp.MustCompile(`(?i)^(confidentiality notice|disclaimer|aviso de confidencialidad|aviso de confidencialidade|aviso legal|this (e-?mail|message)( and any attachments)? (is|are|may be|contains) (confidential|privileged)|este (correo|mensaje).{0,40}confidencial|esta (mensagem|e-?mail).{0,40}confidencia)`)
)

// valedictions are sign-off lines; everything after them is a signature.
var valedictions = map[string]bool{
	"best": true, "best regards": true, "regards": true, "kind regards": true, "warm regards": true,
	"thanks": true, "thank you": true, "many thanks": true, "cheers": true, "sincerely": true, "br": true,
	"saludos": true, "un saludo": true, "saludos cordiales": true, "atentamente": true, "cordialmente": true,
	"gracias": true, "muchas gracias": true, "un abrazo": true, "abrazo": true, "slds": true,
	"atenciosamente": true, "abs": true, "abraços": true, "abraço": true, "att": true, "obrigado": true,
	"obrigada": true, "grato": true, "cumprimentos": true, "um abraço": true,
}

// Strip removes quoted history, forwarded headers, signatures, mobile footers
// and disclaimers, leaving only what the sender wrote in this reply. If the
// reply was written below the quote (nothing survives the cut), it falls back
// to dropping only the ">" lines and header lines.
func Strip(text string) string {
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	var out []string
	content := 0 // non-empty lines kept so far
	for i := 0; i < len(lines); i++ {
		t := strings.TrimSpace(lines[i])
		if strings.HasPrefix(t, ">") {
			continue
		}
		if isCut(lines, i) {
			break
		}
		if content > 0 && valedictions[strings.ToLower(strings.TrimRight(t, ",.!;: "))] {
			break
		}
		if t != "" {
			content++
		}
		out = append(out, lines[i])
	}
	s := strings.TrimSpace(strings.Join(out, "\n"))
	if s != "" {
		return s
	}
	out = out[:0]
	for i, l := range lines {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, ">") || isCut(lines, i) || headerNext.MatchString(t) {
			continue
		}
		out = append(out, l)
	}
	return strings.TrimSpace(strings.Join(out, "\n"))
}

// isCut reports whether line i starts quoted history or a signature.
func isCut(lines []string, i int) bool {
	t := strings.TrimSpace(lines[i])
	switch {
	case t == "--" || t == "—" || t == "-- ":
		return true
	case separator.MatchString(t), mobileFooter.MatchString(t) && len(t) < 80, disclaimer.MatchString(t):
		return true
	case replyHeaderStart.MatchString(t):
		if replyHeaderEnd.MatchString(t) {
			return true
		}
		if i+1 < len(lines) && replyHeaderEnd.MatchString(strings.TrimSpace(lines[i+1])) && len(t) < 200 {
			return true
		}
	case headerFrom.MatchString(t):
		for j := i + 1; j < len(lines) && j <= i+4; j++ {
			if headerNext.MatchString(strings.TrimSpace(lines[j])) {
				return true
			}
		}
	}
	return false
}
