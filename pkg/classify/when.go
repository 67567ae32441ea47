package classify

import (
	"regexp"
	"strings"
)

// Time expressions a reply uses to say when to come back, in English, Spanish and
// Portuguese: quarters, months (with a day), weekdays, "next month", "in three weeks",
// numeric dates. Matched on the folded text (lowercase, no accents).
var (
	month   = `(?:january|february|march|april|may|june|july|august|september|october|november|december|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec|enero|febrero|marzo|abril|mayo|junio|julio|agosto|septiembre|setiembre|octubre|noviembre|diciembre|janeiro|fevereiro|marco|maio|junho|julho|setembro|outubro|novembro|dezembro)`
	weekday = `(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|lunes|martes|miercoles|jueves|viernes|sabado|domingo|segunda feira|terca feira|quarta feira|quinta feira|sexta feira)`
	season  = `(?:spring|summer|fall|autumn|winter|primavera|verano|otono|verao|outono|inverno)`
	// before are the words that make a bare month, weekday or season a time ("in march",
	// not "we march on"; "until monday"; "in the fall").
	before = `(?:in|by|after|before|until|till|from|on|next|this|early|mid|late|end of|beginning of|en|el|la|em|no|na|a partir de|hasta|ate|desde|depois de|despues de)`
	// A time said in full: quarters, "next month", "in three weeks", a month with its
	// day or year, a numeric date (not 24/7).
	whole = `q[1-4](?: \d{4})?|` +
		`(?:the )?(?:first|second|third|fourth|1st|2nd|3rd|4th) quarter|` +
		`(?:primer|segundo|tercer|cuarto|primeiro|terceiro|quarto) trimestre|` +
		`(?:next|this coming) (?:week|month|quarter|year)|` +
		`(?:la proxima semana|el proximo mes|el proximo trimestre|el proximo ano|el ano que viene|semana que vem|proxima semana|mes que vem|proximo mes|proximo trimestre|proximo ano|ano que vem)|` +
		`in (?:\d+|a few|a couple of|a couple|two|three|four|six|some) (?:days|weeks|months)|` +
		`(?:en|dentro de) (?:\d+|unos|unas|un par de|dos|tres|seis) (?:dias|semanas|meses)|` +
		`daqui a (?:\d+|uns|umas|alguns|algumas|dois|duas|tres|seis) (?:dias|semanas|meses)|` +
		month + ` \d{1,2}(?:st|nd|rd|th)?(?:,? \d{4})?|` +
		`\d{1,2}(?:st|nd|rd|th)? (?:of |de )?` + month + `|` +
		month + ` \d{4}|` +
		`\d{4}-\d{2}-\d{2}|(?:[0-2]?\d|3[01])/(?:0?[1-9]|1[0-2])(?:/\d{2,4})?|` +
		`after the holidays|despues de las fiestas|depois das festas|next year|later this year`
	whenRe = regexp.MustCompile(`\b(?:` + whole + `|` + before + ` (?:the )?(?:` + month + `(?: \d{4})?|` + weekday + `|` + season + `))\b`)
	// returnedRe is a return's time right after "until" and its like: there a bare
	// weekday, month or day of the month is the time ("until monday", "volto dia 10").
	returnedRe = regexp.MustCompile(`^ (?:the )?(?:` + whole + `|` + weekday + `|` + month + `|\d{1,2}(?:st|nd|rd|th)?)\b`)
	// returnRe finds the expression an out-of-office gives as its return.
	returnRe = regexp.MustCompile(`\b(?:until|till|back on|back in the office on|return on|returning on|will return|return to the office on|hasta el|hasta|regreso el|regresare el|volvere el|de vuelta el|me reincorporo el|retorno em|retorno no dia|retorno dia|volto em|volto no dia|volto dia|ate o dia|ate dia|ate)\b`)
)

// when is the reply's time expression: for an out-of-office the one after "until",
// "back on" and their like (else the first), for a follow-up the first; "" when it
// names none.
func when(text string, returning bool) string {
	folded := fold(strings.Join(strings.Fields(strings.NewReplacer(".", " ", ",", " , ").Replace(text)), " "))
	if returning {
		for _, loc := range returnRe.FindAllStringIndex(folded, -1) {
			if m := returnedRe.FindString(folded[loc[1]:]); m != "" && !strings.HasPrefix(folded[loc[1]:], " 24/7") {
				return strings.TrimSpace(m)
			}
		}
	}
	for _, m := range whenRe.FindAllString(folded, -1) {
		if m != "24/7" {
			return m
		}
	}
	return ""
}
