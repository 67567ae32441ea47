package classify

import (
	"fmt"
	"strings"
	"unicode"
)

// Function words and frequent reply words per language. Words shared by
// Spanish and Portuguese ("que", "para", "de", "me") are left out on purpose:
// they add nothing to the decision.
var langWords = map[string]map[string]float64{
	"en": set(1, "the", "and", "you", "your", "is", "are", "i", "im", "we", "were", "not", "to", "of", "for",
		"this", "that", "with", "please", "thanks", "thank", "my", "our", "it", "be", "will", "have", "would",
		"can", "just", "lets", "send", "yes", "hi", "hello", "but", "at", "on", "in", "from", "what", "how",
		"who", "do", "does", "dont", "interested", "meeting", "call", "out", "office", "until", "am",
		"an", "remove", "stop", "sure", "next", "week", "right", "person", "sounds", "good", "great", "about", "received", "thats", "ill", "youre", "who", "which", "know", "think", "let", "really", "already", "any", "some", "should", "could", "team", "sales", "working", "here", "please",
		"if", "there", "they", "she", "he", "her", "his", "him", "us", "its", "more", "info", "back", "email", "unsubscribe", "received"),
	"es": set(1, "el", "los", "las", "y", "es", "en", "un", "una", "por", "con", "mi", "tu", "su", "sus",
		"gracias", "hola", "estoy", "estamos", "tengo", "tenemos", "muy", "pero", "esta", "eso", "esto",
		"usted", "ustedes", "le", "lo", "del", "al", "buenos", "dias", "saludos", "correo", "quiero",
		"puedo", "hablar", "llamada", "reunion", "ya", "ahora", "tambien", "si", "interesa", "nosotros",
		"hay", "cuando", "donde", "cual", "gustaria", "tiene", "tienen", "puede", "trabajo", "equipo",
		"ese", "bien", "mas", "favor", "baja", "vacaciones", "oficina", "persona", "escribir", "somos",
		"nada", "manana", "semana", "hasta", "ni", "mucho", "perfecto", "pueden", "necesitamos", "interesado",
		"hable", "habla", "encargado", "quien", "estare", "buen", "dia", "usamos", "contamos", "envien",
		"no", "mensaje", "entregado", "direccion", "buzon", "recibido", "jajaja", "jaja", "ningun",
		"conozco", "dale", "equivocado", "nuestro", "nuestra", "ustedes", "lleno", "pudo", "usuario", "desconocido", "ella", "el"),
	"pt": set(1, "o", "os", "as", "do", "da", "dos", "das", "um", "uma", "nao", "e", "com", "em", "na",
		"voce", "voces", "obrigado", "obrigada", "ola", "oi", "estou", "tenho", "temos", "muito", "isso",
		"isto", "esse", "essa", "seu", "sua", "meu", "minha", "nos", "ao", "pelo", "pela", "bom", "tudo",
		"agora", "sim", "ja", "quando", "onde", "qual", "gostaria", "tem", "pode", "podem", "trabalho",
		"equipe", "reuniao", "falar", "conversar", "entao", "aqui", "abraco", "att", "ligacao", "mais",
		"ferias", "escritorio", "pessoa", "favor", "interesse", "ate", "semana", "amanha", "precisamos",
		"fale", "responsavel", "estarei", "vou", "mim", "ele", "ela", "obg", "vcs", "vc", "pra", "legal",
		"manda", "contato", "retorno", "sao", "foi", "bem", "boa", "tarde", "parem", "envio",
		"interessa", "assim", "pro", "bora", "recebido", "kkkk", "kkkkk", "procurando", "sair", "nosso", "nossa", "obrigadao",
		"entregue", "endereco", "errado", "conheco", "nenhum", "mensagem", "valeu", "tbm", "ne", "livre", "quiser", "gente", "dessa", "desta", "enquanto", "quem",
		"lembrar", "cadastrei", "folga", "acesso", "festas", "consegue", "olha", "opa", "chegou"),
}

// Languages the classifier does not read but recognises, to say so by name: a French
// or German reply goes to a person, never to a guess from another language's lexicon.
// Their words are ones the three languages above do not use.
var unreadWords = map[string]map[string]float64{
	"fr": set(1, "je", "nous", "vous", "pas", "merci", "bonjour", "avec", "pour", "une", "des", "suis",
		"sommes", "cette", "mais", "oui", "votre", "notre", "tres", "aujourdhui", "avons", "sont", "ne",
		"interesses", "interesse", "cordialement", "rendez", "semaine", "prochaine", "peut", "etre"),
	"de": set(1, "ich", "wir", "sie", "nicht", "und", "danke", "bitte", "ist", "das", "der", "mit", "fur",
		"uns", "ihr", "ihre", "kein", "keine", "gerne", "hallo", "grusse", "vielen", "haben", "aber", "wenn",
		"nachste", "woche", "freundlichen", "gibt", "sind", "auch"),
}

// Names are the languages' names, for what the classifier says.
var Names = map[string]string{"en": "English", "es": "Spanish", "pt": "Portuguese", "fr": "French", "de": "German"}

// Supported are the languages the classifier reads.
var Supported = []string{"en", "es", "pt"}

// CheckLanguage refuses a language tag the classifier does not read ("fr", "de-AT"),
// naming the ones it does: a tag it would otherwise take as unknown and guess.
func CheckLanguage(tag string) error {
	if tag == "" || normLang(tag) != "und" {
		return nil
	}
	name := Names[strings.ToLower(strings.SplitN(strings.SplitN(strings.TrimSpace(tag), "-", 2)[0], "_", 2)[0])]
	if name == "" {
		name = fmt.Sprintf("%q", tag)
	}
	return fmt.Errorf("the classifier does not read %s (it reads English, Spanish and Portuguese: en, es, pt)", name)
}

func set(w float64, words ...string) map[string]float64 {
	m := make(map[string]float64, len(words))
	for _, x := range words {
		m[x] = w
	}
	return m
}

// apostrophes are taken out of a word before it is looked up ("don't" is "dont").
var apostrophes = strings.NewReplacer("'", "", "’", "")

// DetectLanguage returns "en", "es", "pt", "fr", "de" (read by no lexicon: the reply
// goes to a person) or "und" for the text, by counting
// language-specific words and letters (ã õ ç → pt, ñ ¿ ¡ → es). Quoted history
// should be stripped first, or the quoted outbound e-mail will dominate.
func DetectLanguage(text string) string {
	score := map[string]float64{}
	for _, r := range strings.ToLower(text) {
		switch r {
		case 'ã', 'õ', 'ç', 'ê', 'ô', 'â':
			score["pt"] += 1.5
		case 'ñ', '¿', '¡':
			score["es"] += 1.5
		}
	}
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool {
		return !unicode.IsLetter(r) && r != '\'' && r != '’'
	}) {
		raw := w
		w = fold(apostrophes.Replace(w))
		for lang, words := range langWords {
			score[lang] += words[w]
		}
		for lang, words := range unreadWords {
			score[lang] += words[w]
		}
		switch {
		case strings.HasSuffix(raw, "ção") || strings.HasSuffix(raw, "ções") || strings.HasSuffix(raw, "ão"):
			score["pt"] += 1
		case strings.HasSuffix(raw, "ción") || strings.HasSuffix(raw, "ciones"):
			score["es"] += 1
		}
	}
	best, top, second := "und", 0.0, 0.0
	for _, lang := range []string{"en", "es", "pt", "fr", "de"} {
		switch s := score[lang]; {
		case s > top:
			best, top, second = lang, s, top
		case s > second:
			second = s
		}
	}
	if top < 1 || top == second {
		return "und"
	}
	// Named as unread only on clear evidence: two of its words at least, well ahead.
	if _, unread := unreadWords[best]; unread && (top < 2 || top < 1.5*second) {
		return "und"
	}
	return best
}

// normLang maps a caller-supplied tag ("pt-BR", "ES") to our codes.
func normLang(tag string) string {
	tag = strings.ToLower(strings.TrimSpace(tag))
	if i := strings.IndexAny(tag, "-_"); i >= 0 {
		tag = tag[:i]
	}
	switch tag {
	case "en", "es", "pt":
		return tag
	}
	return "und"
}

var accents = strings.NewReplacer(
	"á", "a", "à", "a", "â", "a", "ã", "a", "ä", "a",
	"é", "e", "è", "e", "ê", "e", "ë", "e",
	"í", "i", "ì", "i", "î", "i", "ï", "i",
	"ó", "o", "ò", "o", "ô", "o", "õ", "o", "ö", "o",
	"ú", "u", "ù", "u", "û", "u", "ü", "u",
	"ç", "c", "ñ", "n",
)

// fold lowercases and removes diacritics, so lexicons match "não"/"nao" and
// "reunión"/"reunion" alike (people type both on phones).
func fold(s string) string { return accents.Replace(strings.ToLower(s)) }

// boundary separates sentences in token streams; phrases never span it.
const boundary = "|"

// tokenize folds the text into word tokens; '?' and emoji are their own
// tokens, sentence punctuation and newlines become boundary, and apostrophes
// vanish ("don't" → "dont").
func tokenize(text string) []string {
	rs := []rune(fold(text))
	var toks []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			toks = append(toks, string(cur))
			cur = cur[:0]
		}
	}
	emit := func(t string) {
		flush()
		if t == boundary && (len(toks) == 0 || toks[len(toks)-1] == boundary) {
			return
		}
		toks = append(toks, t)
	}
	for i, r := range rs {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			cur = append(cur, r)
		case r == '\'' || r == '’' || r == '`':
		case r == '?':
			emit("?")
		case r == '.' && i > 0 && i+1 < len(rs) && unicode.IsDigit(rs[i-1]) && unicode.IsDigit(rs[i+1]):
			flush() // "5.1.1", "10.30" stay one sentence
		case r == '.' || r == '!' || r == ';' || r == '\n':
			emit(boundary)
		case unicode.Is(unicode.So, r):
			emit(string(r))
		default:
			flush()
		}
	}
	flush()
	return toks
}
