//! Grounding: what the model extracted enters memory only when the conversation supports it.
//!
//! A fact or preference about the user needs the user's own words: every content word of its
//! value (after the analysis the search uses, [`engram_text`]: case and accents folded, English
//! stemmed, unspaced scripts by character) must occur in a clause of the user's messages that
//! states something: not a question ("should I move to Lisbon?"), not a supposition ("if I moved
//! to Lisbon"), and not denied ("I don't use Docker", unless the value itself says so). A value
//! with no content word of its own (`true`, `yes`) is checked through its key (`vegetarian`).
//!
//! What fails is rejected with the reason: only the assistant said it, only the extraction
//! prompt's own text says it, the user only asked or supposed it, the user denied it, or nobody
//! said it. Episodes may summarise both sides, so their words are looked for in the whole
//! conversation, and most of them must be there (an episode may not invent events).
//!
//! A clause whose subject is someone else ("my colleague Priyanka swears by Svelte", "she
//! uses Vim") supports no fact about the user, unless the entry names that person or relation
//! (`daughter_allergy: peanuts` from "my daughter Ines is allergic to peanuts").
//!
//! What the user says is over closes a known entry even when the model does not say so
//! ([`Grounding::ends`]): a word of ending ("no longer", "dropped", "nicht mehr"), a loss that
//! names it ("Pepper died", "we sold the Volvo"), or a change away from it ("moved from Leeds to
//! Glasgow", "von Köln nach Leipzig umgezogen", "I left Northwind"). The words for these are
//! small lexicons per language the grounding knows (English, German, French, Spanish); a word
//! with a common second sense is left out or read by its position, since a wrongly closed fact
//! is worse than a stale one the model can still close.
//!
//! This is a mechanism, not a list of facts: it knows nothing of any person, place or tool.

use std::collections::HashSet;

use engram_core::Message;
use engram_text::{Token, is_stopword, tokens};

use crate::extract::ProfileEntry;

/// Words a model adds around a value that say nothing the user must have said: the subject
/// ("user"), the verb of a preference ("prefers", "likes", "uses", "wants"), the words that
/// introduce a name ("named", "called": "a rabbit called Biscuit" comes back as "rabbit named
/// Biscuit"), time words ("now", "currently") and yes/no values. Stems, as [`engram_text`]
/// makes them.
const FILLER: &[&str] = &[
    "call", "current", "fals", "like", "name", "none", "now", "null", "prefer", "true", "use",
    "user", "want", "yes",
];

/// Words that make a clause a supposition rather than a statement (lowercase, as written).
const SUPPOSING: &[&str] = &[
    "if",
    "suppose",
    "supposing",
    "imagine",
    "hypothetically",
    "hypothetical",
    "wonder",
    "wondering",
    "considering",
    "maybe",
    "perhaps",
    "someday",
    "wenn",
    "falls",
    "würde",
    "si",
];

/// Two-word suppositions.
const SUPPOSING_PAIRS: &[(&str, &str)] = &[
    ("thinking", "about"),
    ("thinking", "of"),
    ("what", "if"),
    ("might", "be"),
];

/// Words that deny or end what a clause says (lowercase, as written; `n't` forms are caught by
/// their ending).
const DENYING: &[&str] = &[
    "not",
    "never",
    "anymore",
    "nicht",
    "kein",
    "keine",
    "keinen",
    "nie",
    "niemals",
    "jamais",
    "nunca",
    "stopped",
    "quit",
    "former",
    "formerly",
    "ex",
    "dropped",
    "ditched",
    "abandoned",
    "false",
    "none",
    "no",
    "ne",
    "pas",
    "aufgehört",
    "arrêté",
    "arrete",
];

/// Two-word denials.
const DENYING_PAIRS: &[(&str, &str)] = &[
    ("no", "longer"),
    ("any", "more"),
    ("used", "to"),
    ("gave", "up"),
    ("ya", "no"),
    ("dejé", "de"),
    ("deje", "de"),
];

/// Words that say something is over, not merely not so ("I'm not vegan any more", "we dropped
/// FastAPI", "I quit smoking"); "not" alone is not among them ("I don't like Python" ends no
/// fact about Python). What a clause with one of these names can be closed without the model.
const ENDING: &[&str] = &[
    "anymore",
    "stopped",
    "quit",
    "former",
    "formerly",
    "dropped",
    "ditched",
    "abandoned",
    "aufgehört",
    "arrêté",
    "arrete",
];

/// Two-word endings.
const ENDING_PAIRS: &[(&str, &str)] = &[
    ("no", "longer"),
    ("any", "more"),
    ("used", "to"),
    ("gave", "up"),
    ("ya", "no"),
    ("nicht", "mehr"),
    ("kein", "mehr"),
    ("dejé", "de"),
    ("deje", "de"),
];

/// True for the split endings "ne ... plus" ("je n'utilise plus Java") and "kein(e) ... mehr" /
/// "nicht ... mehr" ("ich bin keine Vegetarierin mehr"): the second word alone is "more".
fn ends_in_two_parts(words: &[String]) -> bool {
    let has = |w: &str| words.iter().any(|x| x == w);
    let french = has("plus") && words.iter().any(|w| w == "ne" || w.starts_with("n'"));
    let german = has("mehr")
        && words
            .iter()
            .any(|w| matches!(w.as_str(), "kein" | "keine" | "keinen" | "keiner" | "nicht"));
    french || german
}

/// Phrases (lowercase, as written) telling that something the clause names is gone: a death, a
/// sale, a giving away, notice given. A clause with one names what it ends by its name ("Pepper
/// died" ends `pet: dog named Pepper`), so only the value's names must be in it
/// ([`name_terms`]). Left out for their everyday second sense: "lost" (weight, a match),
/// "dead" ("dead simple"), "verlassen" ("sich auf etwas verlassen"); "left" is read by its
/// position ([`LEAVING`]).
const LOSING: &[&[&str]] = &[
    // English
    &["died"],
    &["passed", "away"],
    &["put", "down"],
    &["put", "to", "sleep"],
    &["sold"],
    &["gave", "away"],
    &["given", "away"],
    &["rehomed"],
    &["got", "rid", "of"],
    // German
    &["gestorben"],
    &["verstorben"],
    &["starb"],
    &["eingeschläfert"],
    &["verkauft"],
    &["verschenkt"],
    &["gekündigt"],
    // French
    &["mort"],
    &["morte"],
    &["décédé"],
    &["décédée"],
    &["euthanasié"],
    &["euthanasiée"],
    &["vendu"],
    &["vendue"],
    &["vendus"],
    // Spanish
    &["murió"],
    &["murio"],
    &["falleció"],
    &["fallecio"],
    &["vendí"],
    &["vendi"],
    &["vendimos"],
    &["vendido"],
    &["vendida"],
];

/// Phrases that look like a loss and are not ("I'm sold on Svelte", "sold out").
const NOT_LOSING: &[&[&str]] = &[&["sold", "on"], &["sold", "out"]];

/// Verbs of leaving whose object is what was left ("I left Northwind last month", "j'ai quitté
/// Lyon", "dejé Madrid"): the words after one, up to a word of [`LEAVING_STOPS`], are what the
/// clause left behind. Read by position because "left" also means what remains ("two cats
/// left", "nothing left in the budget"): there, nothing follows it.
const LEAVING: &[&str] = &["left", "quitté", "quitte", "dejé", "deje"];

/// Words that end the object of a leaving: prepositions, conjunctions and articles of the
/// languages known ("left Berlin for Munich", "left the keys at home", "dejé de fumar").
const LEAVING_STOPS: &[&str] = &[
    "to", "for", "at", "in", "on", "onto", "into", "and", "because", "after", "when", "with",
    "over", "behind", "a", "an", "the", "à", "pour", "en", "et", "depuis", "parce", "de", "para",
    "por", "y", "porque", "hace", "al",
];

/// Words before "left" that make it a place or what remains ("on the left", "is left").
const NOT_LEAVING_AFTER: &[&str] = &[
    "the",
    "is",
    "are",
    "was",
    "were",
    "nothing",
    "anything",
    "something",
    "much",
    "many",
    "few",
    "little",
    "turn",
    "turned",
    "keep",
    "stay",
];

/// How a change is told in one language: a verb of change, and the old value between a word
/// of "from" and a word of "to" ("moved from Leeds to Glasgow", "von Köln nach Leipzig
/// umgezogen", "déménagé de Paris à Lyon", "me mudé de Madrid a Sevilla").
struct ChangeWords {
    verbs: &'static [&'static str],
    from: &'static [&'static str],
    to: &'static [&'static str],
}

/// The change patterns of the languages known. English uses [`CHANGING`] as its verbs.
const CHANGES: &[ChangeWords] = &[
    ChangeWords {
        verbs: CHANGING,
        from: &["from"],
        to: &["to", "into"],
    },
    ChangeWords {
        verbs: &[
            "umgezogen",
            "gezogen",
            "ziehen",
            "zogen",
            "zog",
            "umziehen",
            "gewechselt",
            "wechseln",
            "wechselten",
            "umgestiegen",
            "umsteigen",
        ],
        from: &["von", "aus", "vom"],
        to: &["nach", "zu", "zum", "zur", "auf", "in", "ins"],
    },
    ChangeWords {
        verbs: &[
            "déménagé",
            "déménagée",
            "déménagés",
            "déménagées",
            "déménager",
            "déménage",
            "demenage",
            "changé",
            "change",
            "passé",
            "passée",
            "migré",
        ],
        from: &["de", "du", "des", "d'"],
        to: &["à", "a", "au", "aux", "vers", "pour", "en"],
    },
    ChangeWords {
        verbs: &[
            "mudé",
            "mude",
            "mudamos",
            "mudado",
            "cambié",
            "cambie",
            "cambiamos",
            "pasé",
            "pase",
            "pasamos",
            "trasladé",
            "trasladamos",
            "migré",
            "migramos",
        ],
        from: &["de", "desde", "del"],
        to: &["a", "al", "hacia", "para"],
    },
];

/// Words that may open a clause before its subject ("and she ...", "und er ...").
const LEADING: &[&str] = &[
    "and", "so", "also", "then", "oh", "well", "plus", "but", "und", "auch", "dann", "aber", "et",
    "puis", "alors", "mais", "y", "también", "pero",
];

/// Third-person pronouns that make someone else a clause's subject ("she swears by Svelte").
const THIRD_PERSON: &[&str] = &[
    "he", "she", "he's", "she's", "his", "her", "er", "sie", "il", "elle", "ils", "elles", "él",
    "ella", "ellos", "ellas",
];

/// Words after French "il" that make it impersonal ("il y a", "il faut").
const IMPERSONAL_AFTER_IL: &[&str] = &["y", "faut", "fait", "s'agit"];

/// Possessives that open "my sister Carla", "meine Kollegin", "mon mari", "mi hermana".
const POSSESSIVES: &[&str] = &[
    "my", "our", "mein", "meine", "meinem", "meinen", "meiner", "unser", "unsere", "unserem",
    "unseren", "mon", "ma", "mes", "notre", "nos", "mi", "mis", "nuestro", "nuestra", "nuestros",
    "nuestras",
];

/// People a user speaks of ("my colleague", "meine Schwester", "mon mari", "mi hija"): a clause
/// with one of them as its subject is about them.
const RELATIONS: &[&str] = &[
    // English
    "colleague",
    "colleagues",
    "coworker",
    "coworkers",
    "friend",
    "friends",
    "boyfriend",
    "girlfriend",
    "partner",
    "wife",
    "husband",
    "spouse",
    "fiancé",
    "fiancée",
    "fiance",
    "fiancee",
    "mother",
    "mom",
    "mum",
    "father",
    "dad",
    "parents",
    "sister",
    "brother",
    "sibling",
    "son",
    "daughter",
    "kid",
    "kids",
    "child",
    "children",
    "boss",
    "manager",
    "teammate",
    "neighbour",
    "neighbor",
    "roommate",
    "flatmate",
    "cousin",
    "uncle",
    "aunt",
    "grandmother",
    "grandma",
    "grandfather",
    "grandpa",
    "grandparents",
    "niece",
    "nephew",
    "mentor",
    // German
    "kollege",
    "kollegin",
    "kollegen",
    "freund",
    "freundin",
    "freunde",
    "partnerin",
    "frau",
    "mann",
    "ehemann",
    "ehefrau",
    "mutter",
    "mama",
    "vater",
    "papa",
    "eltern",
    "schwester",
    "bruder",
    "sohn",
    "tochter",
    "kind",
    "kinder",
    "chef",
    "chefin",
    "nachbar",
    "nachbarin",
    "cousine",
    "onkel",
    "tante",
    "oma",
    "opa",
    // French
    "collègue",
    "collègues",
    "ami",
    "amie",
    "amis",
    "copain",
    "copine",
    "partenaire",
    "femme",
    "mari",
    "mère",
    "père",
    "sœur",
    "soeur",
    "frère",
    "fils",
    "fille",
    "enfant",
    "enfants",
    "patron",
    "patronne",
    "voisin",
    "voisine",
    "oncle",
    // Spanish
    "colega",
    "colegas",
    "compañero",
    "compañera",
    "amigo",
    "amiga",
    "amigos",
    "pareja",
    "esposa",
    "esposo",
    "marido",
    "mujer",
    "madre",
    "mamá",
    "padre",
    "papá",
    "padres",
    "hermana",
    "hermano",
    "hijo",
    "hija",
    "hijos",
    "jefe",
    "jefa",
    "vecino",
    "vecina",
    "novio",
    "novia",
    "primo",
    "prima",
    "tío",
    "tía",
    "abuelo",
    "abuela",
];

/// Words that put the user among a clause's subjects or objects ("my husband and I", "she
/// told me"): such a clause still speaks for the user.
const FIRST_PERSON: &[&str] = &[
    "i", "i'm", "i've", "i'd", "i'll", "me", "myself", "we", "we're", "we've", "we'll", "we'd",
    "us", "ich", "mich", "mir", "wir", "uns", "je", "moi", "nous", "yo", "nosotros", "nosotras",
];

/// True for a clause that says what the one spoken to is ("you are an AI assistant", "du bist
/// ..."): it says nothing about the user.
fn describes_the_listener(words: &[String]) -> bool {
    match words {
        [first, ..] if first == "you're" => true,
        [first, second, ..] => matches!(
            (first.as_str(), second.as_str()),
            ("you", "are" | "were") | ("du", "bist") | ("tu", "es") | ("vous", "êtes")
        ),
        _ => false,
    }
}

/// Words that tell of a change ("switched from vim", "moved from Porto"): a clause with one
/// does not state its old value again.
const CHANGING: &[&str] = &[
    "switched",
    "switch",
    "switching",
    "moved",
    "move",
    "changed",
    "change",
    "replaced",
    "instead",
    "from",
    "left",
    "upgraded",
    "downgraded",
    "became",
];

/// Words that open a question clause inside a sentence ending in `?`.
const ASKING: &[&str] = &[
    "should", "would", "could", "can", "do", "does", "did", "is", "are", "was", "were", "what",
    "how", "which", "where", "who", "why", "when", "or", "will", "shall", "any",
];

/// Why an extracted entry was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// The value's words are in the assistant's messages only.
    AssistantOnly(Vec<String>),
    /// The value's words are in the extraction prompt's text, and nowhere in the conversation.
    PromptExample(Vec<String>),
    /// The user only asked about it or supposed it.
    NotStated(Vec<String>),
    /// The user said it is not so (and the value does not say that).
    Denied(Vec<String>),
    /// Nobody in the conversation said it.
    NotSaid(Vec<String>),
    /// The user said it of someone else ("my colleague uses Svelte"), and the entry does not
    /// name that person or relation.
    AboutSomeoneElse(Vec<String>),
    /// The entry has no words to check.
    Empty,
}

impl Rejection {
    /// A short stable code for logs and reports.
    pub fn code(&self) -> &'static str {
        match self {
            Rejection::AssistantOnly(_) => "assistant_only",
            Rejection::PromptExample(_) => "prompt_example",
            Rejection::NotStated(_) => "not_stated",
            Rejection::Denied(_) => "denied",
            Rejection::NotSaid(_) => "not_said",
            Rejection::AboutSomeoneElse(_) => "about_someone_else",
            Rejection::Empty => "empty",
        }
    }

    /// One line saying why.
    pub fn reason(&self) -> String {
        let words = |w: &[String]| w.join(", ");
        match self {
            Rejection::AssistantOnly(w) => {
                format!("only the assistant said it ({})", words(w))
            }
            Rejection::PromptExample(w) => format!(
                "only the extraction prompt's examples say it, not the conversation ({})",
                words(w)
            ),
            Rejection::NotStated(w) => format!(
                "the user only asked about it or supposed it, never stated it ({})",
                words(w)
            ),
            Rejection::Denied(w) => format!("the user said it is not so ({})", words(w)),
            Rejection::NotSaid(w) => {
                format!("nobody in the conversation said it ({})", words(w))
            }
            Rejection::AboutSomeoneElse(w) => format!(
                "the user said it of someone else, not of themselves ({})",
                words(w)
            ),
            Rejection::Empty => "it has no words to check against the conversation".to_string(),
        }
    }
}

/// The user's words that support an entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Support {
    /// Which message of the conversation (0-based, counting only user and assistant messages
    /// with text, in order).
    pub message: usize,
    /// The sentence of that message that supports it best.
    pub quote: String,
    /// True when one stating clause holds every word (not pieced together from several).
    pub in_one_clause: bool,
}

/// One clause of a user message, with what it does.
#[derive(Debug, Clone)]
struct Clause {
    sentence: usize,
    terms: HashSet<String>,
    asked_or_supposed: bool,
    denied: bool,
    changing: bool,
    ending: bool,
    /// Tells of a loss of what it names ("Pepper died", "we sold the Volvo").
    losing: bool,
    /// In a clause telling of a change, the terms of what was left: the words after "from" up
    /// to "to" ("moved from Leeds to Glasgow", "switched from vim to helix"), or after a verb
    /// of leaving ("I left Northwind last month").
    left: HashSet<String>,
    /// When the clause's subject is someone else: who (for a pronoun, whom the clause before
    /// it spoke of).
    others: Option<Person>,
}

/// Someone the user speaks of: "my colleague Priyanka", "meine Tochter".
#[derive(Debug, Clone, PartialEq, Eq)]
struct Person {
    /// The terms naming them ("colleagu", "priyanka").
    terms: HashSet<String>,
    /// The relation as written, lowercase ("colleague", "tochter"): what an entry about them
    /// is filed under.
    relation: String,
}

/// A conversation prepared for grounding checks.
#[derive(Debug, Clone)]
pub struct Grounding {
    clauses: Vec<Clause>,
    sentences: Vec<(usize, String)>,
    user_terms: HashSet<String>,
    assistant_terms: HashSet<String>,
    prompt_terms: HashSet<String>,
}

/// The content terms of `text`: index terms of its words that are not stopwords or filler, and
/// each character of unspaced scripts.
pub fn content_terms(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for token in tokens(text) {
        match token {
            Token::Word { surface, term } => {
                if is_stopword(&surface) || FILLER.contains(&term.as_str()) {
                    continue;
                }
                if !out.contains(&term) {
                    out.push(term);
                }
            }
            Token::Run(chars) => {
                for c in chars {
                    let term = c.to_string();
                    if !out.contains(&term) {
                        out.push(term);
                    }
                }
            }
        }
    }
    out
}

fn all_terms(text: &str) -> HashSet<String> {
    let mut set = HashSet::new();
    engram_text::for_each_term(text, |t| {
        set.insert(t.to_string());
    });
    set
}

/// Lowercase words as written (letters, digits and apostrophes).
fn plain_words(text: &str) -> Vec<String> {
    written_words(text)
        .iter()
        .map(|w| w.to_lowercase())
        .collect()
}

fn has_word_or_pair(words: &[String], singles: &[&str], pairs: &[(&str, &str)]) -> bool {
    words.iter().any(|w| singles.contains(&w.as_str()))
        || words
            .windows(2)
            .any(|p| pairs.iter().any(|(a, b)| p[0] == *a && p[1] == *b))
}

/// In a clause telling of a change, the terms of what it left: the words after a word of
/// "from" up to a word of "to", in each language whose verb of change the clause has, and the
/// words after a verb of leaving ([`LEAVING`]); empty in any other clause.
fn left_behind(words: &[String]) -> HashSet<String> {
    // French elides "de" before a vowel: "passé d'Eclipse à IntelliJ".
    let words: Vec<String> = words
        .iter()
        .flat_map(|w| match w.strip_prefix("d'") {
            Some(rest) if !rest.is_empty() => vec!["d'".to_string(), rest.to_string()],
            _ => vec![w.clone()],
        })
        .collect();
    let mut old: Vec<&str> = Vec::new();
    for change in CHANGES {
        // "from" alone is no change ("I'm from Porto").
        if !words
            .iter()
            .any(|w| !change.from.contains(&w.as_str()) && change.verbs.contains(&w.as_str()))
        {
            continue;
        }
        let Some(start) = words.iter().position(|w| change.from.contains(&w.as_str())) else {
            continue;
        };
        old.extend(
            words[start + 1..]
                .iter()
                .take_while(|w| !change.to.contains(&w.as_str()))
                .map(String::as_str),
        );
    }
    for (at, word) in words.iter().enumerate() {
        if !LEAVING.contains(&word.as_str())
            || at
                .checked_sub(1)
                .is_some_and(|b| NOT_LEAVING_AFTER.contains(&words[b].as_str()))
        {
            continue;
        }
        old.extend(
            words[at + 1..]
                .iter()
                .take_while(|w| !LEAVING_STOPS.contains(&w.as_str()))
                .map(String::as_str),
        );
    }
    all_terms(&old.join(" "))
}

/// True when a clause tells of the loss of something it names ([`LOSING`]).
fn loses(words: &[String]) -> bool {
    has_phrase(words, LOSING) && !has_phrase(words, NOT_LOSING)
}

/// True when `phrases` has one that occurs in `words`, word for word.
fn has_phrase(words: &[String], phrases: &[&[&str]]) -> bool {
    phrases.iter().any(|phrase| {
        !phrase.is_empty()
            && words
                .windows(phrase.len())
                .any(|w| w.iter().zip(phrase.iter()).all(|(a, b)| a == b))
    })
}

/// True for a word that names the user as a subject or object ("I", "we", "me", "j'ai").
fn first_person(word: &str) -> bool {
    FIRST_PERSON.contains(&word) || (word.starts_with("j'") && word.len() > 2)
}

/// The person a clause is about when its subject is someone else: "my colleague Priyanka ..."
/// ([`relation_at`]) gives the terms of the relation and the name; a clause opening with a
/// third-person pronoun ("she swears by ...") gives `antecedent`, whom the clause before it
/// spoke of, if it spoke of someone ("my colleague ... . She ..."; "for my sister Carla, she
/// turns 40"). `None` when the user is among its subjects or objects ("my husband and I ...",
/// "she told me ..."), or when no one in particular is its subject. `words` are lowercase,
/// `written` the same words as written.
fn someone_else(
    words: &[String],
    written: &[String],
    antecedent: Option<&Person>,
) -> Option<Person> {
    if words.iter().any(|w| first_person(w)) {
        return None;
    }
    let start = words.iter().position(|w| !LEADING.contains(&w.as_str()))?;
    let first = words[start].as_str();
    if THIRD_PERSON.contains(&first) {
        let impersonal = first == "il"
            && words
                .get(start + 1)
                .is_some_and(|w| IMPERSONAL_AFTER_IL.contains(&w.as_str()));
        return if impersonal {
            None
        } else {
            antecedent.cloned()
        };
    }
    relation_at(words, written, start)
}

/// "my colleague Priyanka", "meine Schwester", "mon mari", "mi hija" at `at`: a possessive,
/// at most one word (an adjective: "my older sister") before a relation ([`RELATIONS`]), and
/// a name written with a capital after it. The terms of the relation and the name.
fn relation_at(words: &[String], written: &[String], at: usize) -> Option<Person> {
    if !words
        .get(at)
        .is_some_and(|w| POSSESSIVES.contains(&w.as_str()))
    {
        return None;
    }
    let relation = (at + 1..=at + 2)
        .take_while(|&i| i < words.len())
        .find(|&i| RELATIONS.contains(&words[i].as_str()))?;
    let mut named = vec![written[relation].as_str()];
    if let Some(name) = written
        .get(relation + 1)
        .filter(|w| w.chars().next().is_some_and(char::is_uppercase))
    {
        named.push(name);
    }
    Some(Person {
        terms: all_terms(&named.join(" ")),
        relation: words[relation].clone(),
    })
}

/// Whom a clause speaks of, for a pronoun in the next one: its subject when that is someone
/// else, or else the first relation it names anywhere ("a message for my sister Carla").
fn spoken_of(words: &[String], written: &[String], others: &Option<Person>) -> Option<Person> {
    others
        .clone()
        .or_else(|| (0..words.len()).find_map(|at| relation_at(words, written, at)))
}

/// The terms of a value's names: its words written with a capital ("dog named Pepper" ->
/// `pepper`, "Northwind Logistics" -> both), leaving out a first word capitalised only as the
/// start of a phrase ("Software engineer at Initech" -> `initech`). All its content terms when
/// it has no name. These identify what a loss or a leaving names ("Pepper died").
pub fn name_terms(value: &str) -> Vec<String> {
    let words: Vec<&str> = value
        .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’'))
        .filter(|w| !w.is_empty())
        .collect();
    let capital = |w: &str| w.chars().next().is_some_and(char::is_uppercase);
    let mut names: Vec<&str> = words.iter().copied().filter(|w| capital(w)).collect();
    let sentence_case = names.len() > 1
        && words.first().is_some_and(|w| capital(w))
        && words.get(1).is_some_and(|w| !capital(w));
    if sentence_case {
        names.remove(0);
    }
    let terms = content_terms(&names.join(" "));
    if terms.is_empty() {
        content_terms(value)
    } else {
        terms
    }
}

/// True when the words deny or end something ("not", "don't", "no longer", "died", ...).
fn denies(words: &[String]) -> bool {
    words
        .iter()
        .any(|w| w.ends_with("n't") || (w.starts_with("n'") && w.len() > 2))
        || has_word_or_pair(words, DENYING, DENYING_PAIRS)
        || loses(words)
}

/// Words as written, in their case (letters, digits and apostrophes; `’` as `'`).
fn written_words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '’'))
        .filter(|w| !w.is_empty())
        .map(|w| w.replace('’', "'"))
        .collect()
}

/// True when `text` says something is over or not so ("no longer uses Docker", "false").
pub fn says_no_longer(text: &str) -> bool {
    denies(&plain_words(text))
}

/// Splits text into sentences: after `.`, `!`, `?` or `;` followed by a space or the end, at
/// line breaks, and after the full-width `。！？`.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        current.push(c);
        let ends = match c {
            '\n' | '。' | '！' | '？' => true,
            '.' | '!' | '?' | ';' => chars.peek().is_none_or(|n| n.is_whitespace()),
            _ => false,
        };
        if ends {
            let sentence = current.trim().to_string();
            if !sentence.is_empty() {
                out.push(sentence);
            }
            current.clear();
        }
    }
    let rest = current.trim();
    if !rest.is_empty() {
        out.push(rest.to_string());
    }
    out
}

/// Splits a sentence into clauses at commas, colons and dashes between words, and before "but".
fn clauses(sentence: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for c in sentence.chars() {
        if matches!(c, ',' | ':' | '–' | '—' | '，') {
            out.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    out.push(current);
    let mut split = Vec::new();
    for clause in out {
        let mut rest = clause.as_str();
        while let Some(at) = rest.to_lowercase().find(" but ") {
            split.push(rest[..at].to_string());
            rest = &rest[at + 1..];
        }
        split.push(rest.to_string());
    }
    split
        .into_iter()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .collect()
}

impl Grounding {
    /// Prepares `conversation` (user and assistant messages with text; others are ignored, as
    /// the extractor never sees them) and the text of the prompt the model was given (its
    /// instructions and examples, without the conversation).
    pub fn new(conversation: &[Message], prompt: &str) -> Self {
        let mut clauses_out = Vec::new();
        let mut sentences_out = Vec::new();
        let mut user_terms = HashSet::new();
        let mut assistant_terms = HashSet::new();
        let spoken = spoken(conversation);
        for (index, (is_user, text)) in spoken.iter().enumerate() {
            if !is_user {
                assistant_terms.extend(all_terms(text));
                continue;
            }
            user_terms.extend(all_terms(text));
            // Whom a pronoun refers to: whom the clause before it, in the same message, spoke of.
            let mut antecedent: Option<Person> = None;
            for sentence in sentences(text) {
                let sentence_index = sentences_out.len();
                let question = sentence.ends_with('?') || sentence.ends_with('？');
                let parts = clauses(&sentence);
                let last = parts.len().saturating_sub(1);
                for (i, clause) in parts.iter().enumerate() {
                    let written = written_words(clause);
                    let words = plain_words(clause);
                    let asked = question
                        && (i == last
                            || words.first().is_some_and(|w| ASKING.contains(&w.as_str())));
                    let supposed = has_word_or_pair(&words, SUPPOSING, SUPPOSING_PAIRS)
                        || describes_the_listener(&words);
                    let losing = loses(&words);
                    let terms = all_terms(clause);
                    let others = someone_else(&words, &written, antecedent.as_ref());
                    antecedent = spoken_of(&words, &written, &others);
                    clauses_out.push(Clause {
                        sentence: sentence_index,
                        terms,
                        asked_or_supposed: asked || supposed,
                        denied: denies(&words),
                        changing: losing
                            || has_word_or_pair(&words, CHANGING, &[])
                            || has_word_or_pair(&words, LEAVING, &[])
                            || CHANGES
                                .iter()
                                .any(|c| has_word_or_pair(&words, c.verbs, &[])),
                        ending: has_word_or_pair(&words, ENDING, ENDING_PAIRS)
                            || ends_in_two_parts(&words),
                        losing,
                        left: left_behind(&words),
                        others,
                    });
                }
                sentences_out.push((index, sentence));
            }
        }
        Self {
            clauses: clauses_out,
            sentences: sentences_out,
            user_terms,
            assistant_terms,
            prompt_terms: all_terms(prompt),
        }
    }

    /// Whether `clause` can speak for an entry with the terms `about` (its key and value):
    /// the clause is about the user, or the entry names the person or relation it is about
    /// ("daughter_allergy: peanuts" from "my daughter Ines is allergic to peanuts"). Naming
    /// another relation is not enough: "role: product manager" is not about "my colleague".
    fn speaks_for(&self, clause: &Clause, about: &HashSet<String>) -> bool {
        clause
            .others
            .as_ref()
            .is_none_or(|others| !others.terms.is_disjoint(about))
    }

    /// Whether the user's words support `entry`, and which sentence does best.
    pub fn profile_entry(&self, entry: &ProfileEntry) -> Result<Support, Rejection> {
        let mut terms = content_terms(&entry.value);
        if terms.is_empty() {
            terms = content_terms(&entry.key.replace('_', " "));
        }
        let mut about: HashSet<String> = terms.iter().cloned().collect();
        about.extend(content_terms(&entry.key.replace('_', " ")));
        self.statement(&terms, denies(&plain_words(&entry.value)), &about)
    }

    /// `entry` filed under the person it is about, when the user's words say it of someone
    /// else and the model left them out of the key: `allergy: peanuts`, from "my daughter
    /// Ines is allergic to peanuts", becomes `daughter_allergy: peanuts` (the relation as the
    /// user wrote it). `None` unless the entry is refused as about someone else, the clauses
    /// stating its terms all speak of one relation, the key names no relation of its own, and
    /// the entry so filed is supported.
    pub fn filed_under_person(&self, entry: &ProfileEntry) -> Option<ProfileEntry> {
        if !matches!(
            self.profile_entry(entry),
            Err(Rejection::AboutSomeoneElse(_))
        ) {
            return None;
        }
        let key_words = plain_words(&entry.key.replace('_', " "));
        if key_words.iter().any(|w| RELATIONS.contains(&w.as_str())) {
            return None;
        }
        let mut terms = content_terms(&entry.value);
        if terms.is_empty() {
            terms = content_terms(&entry.key.replace('_', " "));
        }
        let mut relation: Option<&str> = None;
        for clause in &self.clauses {
            let Some(person) = &clause.others else {
                continue;
            };
            if clause.asked_or_supposed || !terms.iter().any(|t| clause.terms.contains(t)) {
                continue;
            }
            match relation {
                Some(r) if r != person.relation => return None,
                _ => relation = Some(&person.relation),
            }
        }
        let filed = ProfileEntry {
            key: crate::extract::normalize_key(&format!("{}_{}", relation?, entry.key))?,
            value: entry.value.clone(),
        };
        self.profile_entry(&filed).is_ok().then_some(filed)
    }

    /// Whether the user stated something with all of `terms`; `negative` when what is checked
    /// itself denies or ends something (then denying clauses support it). A clause about
    /// someone else counts only when `about` (the entry's key and value terms) names them.
    pub fn statement(
        &self,
        terms: &[String],
        negative: bool,
        about: &HashSet<String>,
    ) -> Result<Support, Rejection> {
        if terms.is_empty() {
            return Err(Rejection::Empty);
        }
        let unsaid: Vec<String> = terms
            .iter()
            .filter(|t| !self.user_terms.contains(*t))
            .cloned()
            .collect();
        if !unsaid.is_empty() {
            return Err(if unsaid.iter().all(|t| self.assistant_terms.contains(t)) {
                Rejection::AssistantOnly(unsaid)
            } else if unsaid
                .iter()
                .all(|t| self.assistant_terms.contains(t) || self.prompt_terms.contains(t))
            {
                Rejection::PromptExample(unsaid)
            } else {
                Rejection::NotSaid(unsaid)
            });
        }
        // A clause states a term when it is not asked, supposed or denied, and the term is not
        // what the clause tells was left ("Köln" in "von Köln nach Leipzig umgezogen").
        let said = |c: &Clause, t: &String| {
            !c.asked_or_supposed && (negative || (!c.denied && !c.left.contains(t)))
        };
        let stating = |c: &Clause, t: &String| said(c, t) && self.speaks_for(c, about);
        let mut not_stated = Vec::new();
        let mut denied = Vec::new();
        let mut of_others = Vec::new();
        for term in terms {
            let holding: Vec<&Clause> = self
                .clauses
                .iter()
                .filter(|c| c.terms.contains(term))
                .collect();
            if holding.iter().any(|c| stating(c, term)) {
                continue;
            }
            if holding.iter().any(|c| said(c, term)) {
                of_others.push(term.clone());
            } else if holding.iter().any(|c| !c.asked_or_supposed) {
                denied.push(term.clone());
            } else {
                not_stated.push(term.clone());
            }
        }
        if !denied.is_empty() {
            return Err(Rejection::Denied(denied));
        }
        if !of_others.is_empty() {
            return Err(Rejection::AboutSomeoneElse(of_others));
        }
        if !not_stated.is_empty() {
            return Err(Rejection::NotStated(not_stated));
        }
        // The sentence with the most of the terms in stating clauses; the latest among equals.
        let mut best: Option<(usize, usize)> = None;
        for (index, _) in self.sentences.iter().enumerate() {
            let covered = terms
                .iter()
                .filter(|t| {
                    self.clauses
                        .iter()
                        .any(|c| c.sentence == index && stating(c, t) && c.terms.contains(*t))
                })
                .count();
            if covered > 0 && best.is_none_or(|(_, n)| covered >= n) {
                best = Some((index, covered));
            }
        }
        let (index, _) = best.ok_or(Rejection::Empty)?;
        let (message, quote) = &self.sentences[index];
        let in_one_clause = self
            .clauses
            .iter()
            .any(|c| terms.iter().all(|t| stating(c, t) && c.terms.contains(t)));
        Ok(Support {
            message: *message,
            quote: crate::extract::cut(quote, 300),
            in_one_clause,
        })
    }

    /// True when one clause of the user's states all of `terms` as still so: not asked, supposed
    /// or denied, and not telling of a change ("switched from ..."). A conversation that does
    /// this for a known value has not replaced it.
    /// `about` is the entry's key and value terms: a clause about someone else restates only
    /// what names them.
    pub fn restates(&self, terms: &[String], about: &HashSet<String>) -> bool {
        !terms.is_empty()
            && self.clauses.iter().any(|c| {
                !c.asked_or_supposed
                    && !c.denied
                    && !c.changing
                    && self.speaks_for(c, about)
                    && terms.iter().all(|t| c.terms.contains(t))
            })
    }

    /// Whether the user said that something with `terms` is over: every term in a clause that
    /// denies or tells of a change ("I'm not vegan any more", "we dropped FastAPI", "I moved
    /// from Leeds"), not asked or supposed. A plain statement of it ("I'm a nurse") ends nothing.
    pub fn revokes(&self, terms: &[String]) -> Result<Support, Rejection> {
        if terms.is_empty() {
            return Err(Rejection::Empty);
        }
        let about: HashSet<String> = terms.iter().cloned().collect();
        let support = self.statement(terms, true, &about)?;
        let revoking: Vec<String> = terms
            .iter()
            .filter(|t| {
                !self.clauses.iter().any(|c| {
                    !c.asked_or_supposed
                        && (c.denied || c.changing)
                        && self.speaks_for(c, &about)
                        && c.terms.contains(*t)
                })
            })
            .cloned()
            .collect();
        if revoking.is_empty() {
            Ok(support)
        } else {
            Err(Rejection::NotStated(revoking))
        }
    }

    /// The user's sentence that says the profile entry `key: value` is over, decided without
    /// the model, from one clause of the user's that is not asked or supposed and is about
    /// the user (or names whom it is about), and that:
    /// - holds every term of the value and a word of ending ("not vegan any more", "dropped
    ///   FastAPI", "ich esse kein Fleisch mehr"), or
    /// - tells of a loss and holds the value's names ([`name_terms`]: "Pepper died" ends
    ///   `pet: dog named Pepper`), or
    /// - tells of a change away from the value's names ("moved from Leeds to Glasgow", "von
    ///   Köln nach Leipzig umgezogen", "I left Northwind last month").
    ///
    /// A value without words of its own (`true`, `yes`) is looked for by its key. Stricter than
    /// [`Grounding::revokes`], which the model's own "ended" entries pass.
    pub fn ends(&self, key: &str, value: &str) -> Option<Support> {
        let key_terms = content_terms(&key.replace('_', " "));
        let mut terms = content_terms(value);
        let mut names = name_terms(value);
        if terms.is_empty() || matches!(value.trim().to_lowercase().as_str(), "true" | "yes") {
            terms = key_terms.clone();
            names = key_terms.clone();
        }
        if terms.is_empty() || names.is_empty() {
            return None;
        }
        let about: HashSet<String> = terms.iter().chain(&key_terms).cloned().collect();
        let all_in =
            |set: &HashSet<String>, wanted: &[String]| wanted.iter().all(|t| set.contains(t));
        let clause = self.clauses.iter().rev().find(|c| {
            !c.asked_or_supposed
                && self.speaks_for(c, &about)
                && ((c.ending && all_in(&c.terms, &terms))
                    || (c.losing && all_in(&c.terms, &names))
                    || all_in(&c.left, &names))
        })?;
        let (message, quote) = &self.sentences[clause.sentence];
        Some(Support {
            message: *message,
            quote: crate::extract::cut(quote, 300),
            in_one_clause: true,
        })
    }

    /// Whether an episode's summary is made of the conversation's words: at least
    /// `min_share` of its content words occur in some message (either side), and every word
    /// with a digit does (dates the extractor resolved, "2024-05-15", are its own and exempt).
    pub fn episode(&self, summary: &str, min_share: f64) -> Result<(), Rejection> {
        let terms: Vec<String> = content_terms(summary)
            .into_iter()
            .filter(|t| !EPISODE_FILLER.contains(&t.as_str()))
            .collect();
        if terms.is_empty() {
            return Err(Rejection::Empty);
        }
        let said = |t: &String| self.user_terms.contains(t) || self.assistant_terms.contains(t);
        let dates = resolved_date_terms(summary);
        let missing: Vec<String> = terms
            .iter()
            .filter(|t| !said(t) && !dates.contains(*t))
            .cloned()
            .collect();
        let share = 1.0 - missing.len() as f64 / terms.len() as f64;
        let numbers_missing = missing
            .iter()
            .any(|t| t.chars().any(|c| c.is_ascii_digit()));
        if share + 1e-9 < min_share || numbers_missing {
            return Err(
                if missing.iter().all(|t| self.prompt_terms.contains(t)) && !missing.is_empty() {
                    Rejection::PromptExample(missing)
                } else {
                    Rejection::NotSaid(missing)
                },
            );
        }
        Ok(())
    }
}

/// Words an episode summary uses to tell what happened, which the conversation need not hold.
const EPISODE_FILLER: &[&str] = &[
    "assist", "ask", "discuss", "explain", "help", "mention", "request", "said", "say", "suggest",
    "talk", "told", "tell",
];

/// The numbers of absolute dates (`2024-05-15`, `2024-05`) in `text`: the extractor writes them
/// for relative dates ("yesterday"), so they are its own, not invented events.
fn resolved_date_terms(text: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    for word in text.split(|c: char| !(c.is_ascii_digit() || c == '-')) {
        let parts: Vec<&str> = word.split('-').collect();
        let shaped = parts.len() >= 2
            && parts.len() <= 3
            && parts[0].len() == 4
            && parts[1..].iter().all(|p| p.len() == 2)
            && parts.iter().all(|p| p.chars().all(|c| c.is_ascii_digit()));
        if shaped {
            out.extend(parts.iter().map(|p| p.to_string()));
        }
    }
    out
}

/// User and assistant messages with text, in order: `(is_user, text)`.
pub fn spoken(conversation: &[Message]) -> Vec<(bool, &str)> {
    conversation
        .iter()
        .filter_map(|m| match m {
            Message::User { content } if !content.trim().is_empty() => Some((true, content.trim())),
            Message::Assistant(a) if !a.content.trim().is_empty() => {
                Some((false, a.content.trim()))
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, value: &str) -> ProfileEntry {
        ProfileEntry {
            key: key.into(),
            value: value.into(),
        }
    }

    fn check(conversation: &[Message], key: &str, value: &str) -> Result<Support, Rejection> {
        Grounding::new(
            conversation,
            "Example: web_framework, editor: an editor name",
        )
        .profile_entry(&entry(key, value))
    }

    #[test]
    fn what_the_user_said_is_supported_with_its_sentence() {
        let talk = [
            Message::user("Hello there. I work as a nurse in Hamburg, mostly night shifts."),
            Message::assistant("Night shifts are hard. Have you thought about Munich?"),
        ];
        let support = check(&talk, "role", "Nurse").unwrap();
        assert_eq!(support.message, 0);
        assert_eq!(
            support.quote,
            "I work as a nurse in Hamburg, mostly night shifts."
        );
        assert!(check(&talk, "location", "hamburg").is_ok());
        assert!(check(&talk, "work_schedule", "night shifts").is_ok());
    }

    #[test]
    fn the_word_that_introduces_a_name_need_not_be_the_users() {
        let talk = [Message::user(
            "Sad news, our old cat died. We adopted a rabbit called Nugget yesterday though.",
        )];
        assert!(check(&talk, "pet", "rabbit named Nugget").is_ok());
        assert!(check(&talk, "pet_name", "Nugget").is_ok());
        // The name itself must still be the user's.
        assert_eq!(
            check(&talk, "pet", "rabbit named Clover")
                .unwrap_err()
                .code(),
            "not_said"
        );
    }

    #[test]
    fn the_assistant_the_prompt_and_nobody_are_told_apart() {
        let talk = [
            Message::user("I work as a nurse in Hamburg."),
            Message::assistant("Many nurses move to Munich."),
        ];
        assert_eq!(
            check(&talk, "location", "Munich"),
            Err(Rejection::AssistantOnly(vec!["munich".into()]))
        );
        assert_eq!(
            check(&talk, "web_framework", "web framework")
                .unwrap_err()
                .code(),
            "prompt_example"
        );
        assert_eq!(
            check(&talk, "employer", "Porto General")
                .unwrap_err()
                .code(),
            "not_said"
        );
        assert_eq!(
            check(&talk, "location", "Hamburg, Germany"),
            Err(Rejection::NotSaid(vec!["germani".into()]))
        );
    }

    #[test]
    fn questions_suppositions_and_denials_are_not_statements() {
        let talk = [Message::user(
            "If I moved to Lisbon, what would rent cost? Should I learn Rust? \
             I don't use Docker. I'm not vegetarian any more",
        )];
        assert_eq!(
            check(&talk, "location", "Lisbon").unwrap_err().code(),
            "not_stated"
        );
        assert_eq!(
            check(&talk, "programming_language", "Rust")
                .unwrap_err()
                .code(),
            "not_stated"
        );
        assert_eq!(
            check(&talk, "container_tool", "Docker").unwrap_err().code(),
            "denied"
        );
        assert_eq!(
            check(&talk, "vegetarian", "true").unwrap_err().code(),
            "denied"
        );
        // A value that itself says "not" is what the user said.
        assert!(check(&talk, "container_tool", "does not use Docker").is_ok());
        assert!(check(&talk, "diet", "not vegetarian").is_ok());
    }

    #[test]
    fn a_statement_next_to_a_question_still_counts() {
        let talk = [Message::user(
            "I'm a nurse, any tips for staying awake on night shifts?",
        )];
        assert!(check(&talk, "role", "nurse").is_ok());
        assert_eq!(
            check(&talk, "schedule", "night shifts").unwrap_err().code(),
            "not_stated"
        );
        let talk = [Message::user("I don't eat meat, but I love fish")];
        assert!(check(&talk, "food", "fish").is_ok());
        assert_eq!(check(&talk, "food", "meat").unwrap_err().code(), "denied");
        assert!(check(&talk, "diet", "no meat").is_ok());
    }

    #[test]
    fn values_without_words_are_checked_through_their_key_and_filler_is_ignored() {
        let talk = [Message::user("I'm vegetarian. Keep answers short please.")];
        assert!(check(&talk, "vegetarian", "true").is_ok());
        assert!(check(&talk, "answer_style", "prefers short answers").is_ok());
        assert_eq!(check(&talk, "pets", "yes").unwrap_err().code(), "not_said");
        assert_eq!(check(&talk, "", "").unwrap_err(), Rejection::Empty);
    }

    #[test]
    fn other_languages_and_scripts_are_matched_as_the_search_matches_them() {
        let talk = [Message::user(
            "Ich arbeite als Krankenpfleger in München. 我住在北京。",
        )];
        assert!(check(&talk, "beruf", "Krankenpfleger").is_ok());
        assert!(check(&talk, "ort", "Munchen").is_ok(), "accents are folded");
        assert!(check(&talk, "location", "北京").is_ok());
        assert_eq!(
            check(&talk, "location", "上海").unwrap_err().code(),
            "not_said"
        );
        assert_eq!(
            check(&talk, "role", "nurse").unwrap_err().code(),
            "not_said"
        );
    }

    #[test]
    fn only_denials_and_changes_revoke() {
        let talk = [Message::user(
            "I'm a nurse. I'm not vegan any more. We moved from Leeds to Glasgow.",
        )];
        let g = Grounding::new(&talk, "");
        assert!(g.revokes(&content_terms("vegan")).is_ok());
        assert!(g.revokes(&content_terms("Leeds")).is_ok());
        assert_eq!(
            g.revokes(&content_terms("nurse")).unwrap_err().code(),
            "not_stated"
        );
        assert_eq!(
            g.revokes(&content_terms("Paris")).unwrap_err().code(),
            "not_said"
        );
    }

    #[test]
    fn only_words_of_ending_end_without_the_model() {
        let talk = [Message::user(
            "I'm not vegan any more. We dropped FastAPI last sprint. I don't like Python's \
             packaging. Did you ever quit Java? I moved from Leeds.",
        )];
        let g = Grounding::new(&talk, "");
        let ends = |text: &str| g.ends("k", text).map(|s| s.quote);
        assert_eq!(ends("vegan").as_deref(), Some("I'm not vegan any more."));
        assert!(ends("FastAPI").is_some());
        assert!(ends("Python").is_none(), "a plain denial ends nothing");
        assert!(ends("Java").is_none(), "a question ends nothing");
        assert!(ends("Leeds").is_some(), "what a change left behind");
        let moved = Grounding::new(
            &[Message::user(
                "We moved from Leeds to Glasgow. I'm from Porto originally.",
            )],
            "",
        );
        assert!(
            moved.ends("location", "Glasgow").is_none(),
            "where they went"
        );
        assert!(
            moved.ends("origin", "Porto").is_none(),
            "'from' without a change"
        );
        assert!(
            ends("vegan FastAPI").is_none(),
            "all the words in one clause"
        );
    }

    #[test]
    fn an_old_value_named_in_a_change_is_not_restated() {
        let talk = [Message::user(
            "I switched from vim to helix. I still write Python and Go.",
        )];
        let g = Grounding::new(&talk, "");
        let restates = |value: &str| {
            let terms = content_terms(value);
            g.restates(&terms, &terms.iter().cloned().collect())
        };
        assert!(!restates("vim"));
        assert!(restates("Python"));
        assert!(!restates("Rust"));
    }

    #[test]
    fn episodes_may_summarise_both_sides_but_not_invent() {
        let talk = [
            Message::user("Can you split my FastAPI app into routers?"),
            Message::assistant("Done: app/routers has one module per resource."),
        ];
        let g = Grounding::new(&talk, "");
        assert!(
            g.episode(
                "The assistant helped split the user's FastAPI app into routers, one module per resource, on 2024-05-16",
                0.6
            )
            .is_ok()
        );
        assert_eq!(
            g.episode(
                "Deployed the Django app to Kubernetes and fixed billing",
                0.6
            )
            .unwrap_err()
            .code(),
            "not_said"
        );
        assert!(g.episode("Split the app into 12 routers", 0.6).is_err());
    }

    fn ends_in(text: &str, key: &str, value: &str) -> bool {
        Grounding::new(&[Message::user(text)], "")
            .ends(key, value)
            .is_some()
    }

    #[test]
    fn a_loss_ends_what_it_names_in_each_language() {
        let pepper =
            "Sad news, Pepper died last week. We adopted a rabbit called Biscuit yesterday though.";
        assert!(ends_in(pepper, "pet", "dog named Pepper"), "by its name");
        assert!(!ends_in(pepper, "pet", "rabbit called Biscuit"));
        assert!(ends_in(
            "Our old cat Tom passed away in May.",
            "pet",
            "cat named Tom"
        ));
        assert!(ends_in("We sold the Volvo last month.", "car", "Volvo"));
        assert!(ends_in(
            "Unser Hund Bello ist letzte Woche gestorben.",
            "haustier",
            "Hund Bello"
        ));
        assert!(ends_in(
            "Ich habe bei Siemens gekündigt.",
            "arbeitgeber",
            "Siemens"
        ));
        assert!(ends_in(
            "Notre chat Minou est mort hier.",
            "animal",
            "chat Minou"
        ));
        assert!(ends_in(
            "Nuestro perro Toby murió el mes pasado.",
            "mascota",
            "perro Toby"
        ));
        assert!(ends_in("Vendimos el Seat en enero.", "coche", "Seat"));
        // What a loss does not name, a question or a supposition, and someone else's loss.
        assert!(!ends_in(
            "My grandfather died last year.",
            "pet",
            "dog named Pepper"
        ));
        assert!(!ends_in(
            "My grandfather died last year.",
            "location",
            "Leeds"
        ));
        assert!(!ends_in("Mein Opa ist gestorben.", "wohnort", "Köln"));
        assert!(!ends_in("If Pepper died, I'd be lost.", "pet", "Pepper"));
        assert!(!ends_in("My sister sold her Volvo.", "car", "Volvo"));
        assert!(
            !ends_in("I'm sold on Svelte.", "tools", "Svelte"),
            "convinced"
        );
        assert!(!ends_in("I put Rust on my CV.", "language", "Rust"));
    }

    #[test]
    fn a_change_or_a_leaving_ends_what_was_left_in_each_language() {
        let left = "Quick update: I left Northwind Logistics last month.";
        assert!(ends_in(left, "employer", "Northwind Logistics"));
        assert!(ends_in(left, "role", "Software engineer at Northwind"));
        assert!(!ends_in(left, "role", "backend developer"));
        assert!(!ends_in("I left the keys at home.", "place", "home"));
        assert!(!ends_in("I have two cats left.", "pets", "two cats"));
        assert!(!ends_in(
            "Nothing left of Rust in our stack.",
            "language",
            "Rust"
        ));
        assert!(!ends_in("I left Berlin for Munich.", "location", "Munich"));
        assert!(ends_in("I left Berlin for Munich.", "location", "Berlin"));
        let umzug = "Wir sind letzte Woche von Köln nach Leipzig umgezogen.";
        assert!(ends_in(umzug, "wohnort", "Köln"));
        // What a change left is not stated as current; where it went is.
        let talk = [Message::user(umzug)];
        assert!(check(&talk, "wohnort", "Leipzig").is_ok());
        assert_eq!(
            check(&talk, "umzug", "Köln nach Leipzig")
                .unwrap_err()
                .code(),
            "denied"
        );
        assert_eq!(
            check(&talk, "wohnort", "Köln").unwrap_err().code(),
            "denied"
        );
        let left = [Message::user(left)];
        assert_eq!(
            check(&left, "employer", "Northwind Logistics")
                .unwrap_err()
                .code(),
            "denied"
        );
        assert!(!ends_in(umzug, "wohnort", "Leipzig"), "where they went");
        assert!(
            !ends_in("Ich komme aus Köln.", "heimat", "Köln"),
            "no change"
        );
        assert!(ends_in(
            "Ich bin von Eclipse auf IntelliJ umgestiegen.",
            "ide",
            "Eclipse"
        ));
        let demenage = "Nous avons déménagé de Paris à Lyon.";
        assert!(ends_in(demenage, "ville", "Paris"));
        assert!(!ends_in(demenage, "ville", "Lyon"));
        assert!(ends_in(
            "Je suis passé d'Eclipse à IntelliJ.",
            "ide",
            "Eclipse"
        ));
        assert!(!ends_in("Je parle de Paris à mes amis.", "ville", "Paris"));
        assert!(ends_in(
            "J'ai quitté Renault en mars.",
            "employeur",
            "Renault"
        ));
        let mudanza = "Nos mudamos de Madrid a Sevilla.";
        assert!(ends_in(mudanza, "ciudad", "Madrid"));
        assert!(!ends_in(mudanza, "ciudad", "Sevilla"));
        assert!(!ends_in("Soy de Madrid.", "origen", "Madrid"));
        // Endings in two parts.
        assert!(ends_in(
            "Ich bin keine Vegetarierin mehr.",
            "ernährung",
            "Vegetarierin"
        ));
        assert!(ends_in("Je ne mange plus de viande.", "regime", "viande"));
        assert!(
            !ends_in("Je mange plus de viande.", "regime", "viande"),
            "more, not no more"
        );
        assert!(ends_in("Dejé de usar Java.", "lenguaje", "Java"));
    }

    #[test]
    fn a_clause_about_someone_else_supports_nothing_about_the_user() {
        let talk = [Message::user(
            "My colleague Priyanka is a frontend developer and she swears by Svelte. \
             Should our team try it?",
        )];
        assert_eq!(
            check(&talk, "tools", "Svelte"),
            Err(Rejection::AboutSomeoneElse(vec!["svelt".into()]))
        );
        assert_eq!(
            check(&talk, "role", "frontend developer")
                .unwrap_err()
                .code(),
            "about_someone_else"
        );
        // An entry that names the person or the relation is about them, and allowed.
        assert!(check(&talk, "colleague_tools", "Svelte").is_ok());
        assert!(check(&talk, "colleague", "Priyanka, frontend developer").is_ok());
        let ines = [Message::user(
            "Please remember: my daughter Ines is allergic to peanuts.",
        )];
        assert!(check(&ines, "daughter_allergy", "peanuts").is_ok());
        assert!(check(&ines, "family", "daughter Ines is allergic to peanuts").is_ok());
        assert!(check(&ines, "children", "Ines").is_ok());
        assert_eq!(
            check(&ines, "allergy", "peanuts").unwrap_err().code(),
            "about_someone_else"
        );
        // The user among the subjects, a pronoun for something the user has, other languages.
        let both = [Message::user(
            "My husband Tomas and I are expecting twins in March.",
        )];
        assert!(check(&both, "family", "expecting twins").is_ok());
        let cat = [Message::user("I have a cat. Her name is Miso.")];
        assert!(check(&cat, "pet", "cat named Miso").is_ok());
        assert!(
            check(&cat, "pet", "Miso").is_ok(),
            "no one was named before 'her'"
        );
        let carla = [Message::user(
            "Write a birthday message for my sister Carla, she turns 40 on Saturday.",
        )];
        assert!(check(&carla, "sister", "Carla").is_ok());
        assert!(check(&carla, "sister_birthday", "turns 40 on Saturday").is_ok());
        assert_eq!(
            check(&carla, "age", "40").unwrap_err().code(),
            "about_someone_else"
        );
        let manager = [Message::user("My colleague Anna is a product manager.")];
        assert_eq!(
            check(&manager, "role", "product manager")
                .unwrap_err()
                .code(),
            "about_someone_else",
            "naming another relation is not naming her"
        );
        let german = [Message::user(
            "Ich nutze Helix. Meine Kollegin nutzt Vim, sie schwört auf Emacs.",
        )];
        assert!(check(&german, "editor", "Helix").is_ok());
        assert_eq!(
            check(&german, "editor", "Vim").unwrap_err().code(),
            "about_someone_else"
        );
        assert_eq!(
            check(&german, "editor", "Emacs").unwrap_err().code(),
            "about_someone_else"
        );
        let french = [Message::user(
            "Mon mari est végétarien. Il y a du Python partout au bureau.",
        )];
        assert_eq!(
            check(&french, "regime", "végétarien").unwrap_err().code(),
            "about_someone_else"
        );
        assert!(
            check(&french, "langage", "Python").is_ok(),
            "impersonal 'il y a'"
        );
        let spanish = [Message::user("Mi hermana vive en Sevilla.")];
        assert_eq!(
            check(&spanish, "ciudad", "Sevilla").unwrap_err().code(),
            "about_someone_else"
        );
        assert!(check(&spanish, "hermana", "vive en Sevilla").is_ok());
        // Someone else's ending ends nothing of the user's.
        assert!(!ends_in(
            "My sister quit Java.",
            "programming_language",
            "Java"
        ));
        let g = Grounding::new(&[Message::user("My sister dropped Java.")], "");
        assert!(g.revokes(&content_terms("Java")).is_err());
    }

    #[test]
    fn what_the_user_said_of_someone_else_is_filed_under_them() {
        let filed = |talk: &[Message], key: &str, value: &str| {
            Grounding::new(talk, "")
                .filed_under_person(&entry(key, value))
                .map(|e| e.key)
        };
        let ines = [Message::user(
            "Please remember: my daughter Ines is allergic to peanuts.",
        )];
        assert_eq!(
            filed(&ines, "allergy", "peanuts").as_deref(),
            Some("daughter_allergy")
        );
        // Already theirs, or the user's own: nothing to file.
        assert_eq!(filed(&ines, "daughter_allergy", "peanuts"), None);
        let own = [Message::user("I am allergic to peanuts.")];
        assert_eq!(filed(&own, "allergy", "peanuts"), None);
        // Through a pronoun, and in another language, as the user wrote the relation.
        let priyanka = [Message::user(
            "My colleague Priyanka is a frontend developer and she swears by Svelte.",
        )];
        assert_eq!(
            filed(&priyanka, "tools", "Svelte").as_deref(),
            Some("colleague_tools")
        );
        let hermana = [Message::user("Mi hermana vive en Sevilla.")];
        assert_eq!(
            filed(&hermana, "ciudad", "Sevilla").as_deref(),
            Some("hermana_ciudad")
        );
        // A key naming another relation is not refiled, nor what two people are said to do.
        let anna = [Message::user("My colleague Anna is a product manager.")];
        assert_eq!(filed(&anna, "sister_role", "product manager"), None);
        let two = [Message::user(
            "My sister lives in Lyon. My brother lives in Lyon too.",
        )];
        assert_eq!(filed(&two, "city", "Lyon"), None);
        // What the user only asked about, or only the assistant said, stays refused.
        let asked = [Message::user("Is my daughter allergic to peanuts?")];
        assert_eq!(filed(&asked, "allergy", "peanuts"), None);
        let assistant = [
            Message::user("My daughter Ines starts school soon."),
            Message::assistant("Many schools are strict about peanuts."),
        ];
        assert_eq!(filed(&assistant, "allergy", "peanuts"), None);
    }

    #[test]
    fn the_profile_prompts_someone_else_placeholder_copied_is_refused() {
        // The extraction prompt asks for "<relation>_<subject>" keys when the user speaks of
        // someone else; a model that copies the placeholder instead of naming the person gets
        // nothing into the profile.
        let prompt = format!(
            "{}\n{}",
            crate::prompts::EXTRACT_EPISODES.text(),
            crate::prompts::EXTRACT_PROFILE.text()
        );
        assert!(prompt.contains("\"<relation>_<subject>\""));
        let ines = [Message::user(
            "Please remember: my daughter Ines is allergic to peanuts.",
        )];
        let g = Grounding::new(&ines, &prompt);
        for (key, value) in [
            ("<relation>_<subject>", "<user's words>"),
            ("<relation>_allergy", "peanuts"),
            ("relation_allergy", "peanuts"),
        ] {
            assert!(
                g.profile_entry(&entry(key, value)).is_err(),
                "{key}: {value}"
            );
        }
        assert!(
            g.profile_entry(&entry("daughter_allergy", "peanuts"))
                .is_ok()
        );
    }

    #[test]
    fn names_are_the_capitalised_words_of_a_value() {
        assert_eq!(name_terms("dog named Pepper"), vec!["pepper"]);
        assert_eq!(name_terms("Dog named Pepper"), vec!["pepper"]);
        assert_eq!(
            name_terms("Northwind Logistics"),
            vec!["northwind", "logist"]
        );
        assert_eq!(name_terms("Software engineer at Initech"), vec!["initech"]);
        assert_eq!(name_terms("Vegetarian"), vec!["vegetarian"]);
        assert_eq!(name_terms("backend developer"), vec!["backend", "develop"]);
    }

    proptest::proptest! {
        #[test]
        fn grounding_never_panics(text in "\\PC{0,120}", value in "\\PC{0,30}") {
            let talk = [Message::user(text.clone()), Message::assistant(text)];
            let g = Grounding::new(&talk, "prompt");
            let _ = g.profile_entry(&entry("k", &value));
            let _ = g.episode(&value, 0.6);
        }

        #[test]
        fn a_value_made_of_a_stated_clause_is_supported(words in proptest::collection::vec("[a-z]{3,9}", 1..6)) {
            let clause = words.join(" ");
            let talk = [Message::user(format!("{clause}."))];
            let g = Grounding::new(&talk, "");
            let value_terms = content_terms(&clause);
            let negative = denies(&plain_words(&clause));
            let result = g.profile_entry(&entry("k", &clause));
            if !value_terms.is_empty() && !has_word_or_pair(&plain_words(&clause), SUPPOSING, SUPPOSING_PAIRS) {
                proptest::prop_assert!(result.is_ok() || negative, "{clause}: {result:?}");
            }
        }
    }
}
