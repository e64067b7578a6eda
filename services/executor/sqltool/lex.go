package sqltool

import "strings"

// tokKind is the kind of a lexical token of PostgreSQL's SQL.
type tokKind int

const (
	tokSpace   tokKind = iota // white space
	tokComment                // -- to end of line, or /* */ (nested)
	tokWord                   // identifier or keyword, unquoted
	tokQIdent                 // "quoted identifier" or U&"..."
	tokString                 // '...', E'...', B'...', X'...', N'...', U&'...'
	tokDollar                 // $tag$ ... $tag$
	tokParam                  // $1
	tokNumber
	tokSemi  // ;
	tokOpen  // (
	tokClose // )
	tokOther // operators and other punctuation
)

// token is one lexical token. Concatenating the text of every token gives
// back the input exactly.
type token struct {
	kind tokKind
	text string
	// unterminated marks a string, quoted identifier, dollar quote or
	// block comment that runs to the end of the input.
	unterminated bool
	// esc is the escape character a UESCAPE clause set for a U& token
	// (0: the default backslash).
	esc rune
}

// upper is a word's keyword form (ASCII letters upper-cased, as
// Postgres's keyword lookup folds them); "" for other tokens.
func (t token) upper() string {
	if t.kind != tokWord {
		return ""
	}
	return upperASCII(t.text)
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 0x80 || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
}

func isIdentCont(c byte) bool {
	return isIdentStart(c) || (c >= '0' && c <= '9') || c == '$'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// lex splits src into tokens the way PostgreSQL's scanner does for
// everything that decides where a statement ends and what its words are:
// standard strings (” doubles a quote; standard_conforming_strings is
// forced on for every connection, see New), E” strings (backslash
// escapes), quoted identifiers, dollar quotes with tags, nested block
// comments, line comments (which "--" starts anywhere, even inside an
// operator), parameters and semicolons. It never fails: an unterminated
// construct runs to the end of the input and is marked.
//
// It is one loop over the input with a case per construct, longer than
// the house's ~80 lines: a scanner reads best as one piece, each case
// beside the others it must not overlap.
func lex(src string) []token {
	var toks []token
	i := 0
	n := len(src)
	emit := func(kind tokKind, end int, unterminated bool) {
		toks = append(toks, token{kind: kind, text: src[i:end], unterminated: unterminated})
		i = end
	}
	for i < n {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			j := i + 1
			for j < n && strings.IndexByte(" \t\n\r\f\v", src[j]) >= 0 {
				j++
			}
			emit(tokSpace, j, false)
		case c == '-' && i+1 < n && src[i+1] == '-':
			j := strings.IndexAny(src[i:], "\n\r")
			if j < 0 {
				emit(tokComment, n, false)
			} else {
				emit(tokComment, i+j, false)
			}
		case c == '/' && i+1 < n && src[i+1] == '*':
			depth, j := 1, i+2
			for j < n && depth > 0 {
				switch {
				case src[j] == '/' && j+1 < n && src[j+1] == '*':
					depth++
					j += 2
				case src[j] == '*' && j+1 < n && src[j+1] == '/':
					depth--
					j += 2
				default:
					j++
				}
			}
			emit(tokComment, j, depth > 0)
		case c == '\'':
			end, ok := scanQuoted(src, i+1, '\'', false)
			emit(tokString, end, !ok)
		case c == '"':
			end, ok := scanQuoted(src, i+1, '"', false)
			emit(tokQIdent, end, !ok)
		case c == '$' && i+1 < n && isDigit(src[i+1]):
			j := i + 1
			for j < n && isDigit(src[j]) {
				j++
			}
			emit(tokParam, j, false)
		case c == '$':
			// $tag$ where tag is empty or an identifier without '$'.
			j := i + 1
			if j < n && isIdentStart(src[j]) {
				j++
				for j < n && isIdentCont(src[j]) && src[j] != '$' {
					j++
				}
			}
			if j < n && src[j] == '$' {
				delim := src[i : j+1]
				k := strings.Index(src[j+1:], delim)
				if k < 0 {
					emit(tokDollar, n, true)
				} else {
					emit(tokDollar, j+1+k+len(delim), false)
				}
			} else {
				emit(tokOther, i+1, false)
			}
		case isIdentStart(c):
			j := i + 1
			for j < n && isIdentCont(src[j]) {
				j++
			}
			word := src[i:j]
			switch {
			case j < n && src[j] == '\'' && (word == "e" || word == "E"):
				end, ok := scanQuoted(src, j+1, '\'', true)
				emit(tokString, end, !ok)
			case j < n && src[j] == '\'' && strings.ContainsAny(word, "bBxXnN") && len(word) == 1:
				end, ok := scanQuoted(src, j+1, '\'', false)
				emit(tokString, end, !ok)
			case (word == "u" || word == "U") && j+1 < n && src[j] == '&' && (src[j+1] == '\'' || src[j+1] == '"'):
				q := src[j+1]
				end, ok := scanQuoted(src, j+2, q, false)
				if q == '\'' {
					emit(tokString, end, !ok)
				} else {
					emit(tokQIdent, end, !ok)
				}
			default:
				emit(tokWord, j, false)
			}
		case isDigit(c) || (c == '.' && i+1 < n && isDigit(src[i+1])):
			j := i + 1
			for j < n && (isDigit(src[j]) || src[j] == '.' || src[j] == '_' || isIdentStart(src[j])) {
				j++
			}
			emit(tokNumber, j, false)
		case c == ';':
			emit(tokSemi, i+1, false)
		case c == '(':
			emit(tokOpen, i+1, false)
		case c == ')':
			emit(tokClose, i+1, false)
		default:
			emit(tokOther, i+1, false)
		}
	}
	return toks
}

// scanQuoted scans from just after an opening quote q to just after the
// closing one; a doubled quote stands for one. With backslash, a
// backslash escapes the next byte (E” strings). ok is false when the
// input ends first.
func scanQuoted(src string, j int, q byte, backslash bool) (end int, ok bool) {
	n := len(src)
	for j < n {
		switch src[j] {
		case '\\':
			if backslash {
				j += 2
				continue
			}
		case q:
			if j+1 < n && src[j+1] == q {
				j += 2
				continue
			}
			return j + 1, true
		}
		j++
	}
	return n, false
}
