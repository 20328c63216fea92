// The espeak-ng speech corpus; see data/synth_espeak.h and docs/synth.md.
#include "data/synth_espeak.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <stdexcept>

#include "data/espeak_tts.h"
#include "data/features.h"  // resample (libsoxr)
#include "data/synth_internal.h"

namespace timitseg::data {

using synth_detail::hash_str;
using synth_detail::mix;
using synth_detail::Rng;

namespace {

constexpr int kRate = 16000;

// ---- the word lists: common, plain words of each language (nouns, verbs, adjectives,
// function words), written for timitseg; every word is checked to be spoken by espeak-ng
// in its own language (no switch to English: tests/data/test_synth_espeak.cpp). Mandarin:
// single characters that Debian's espeak-ng cmn dictionary pronounces (it has no
// pinyin input and only part of the common characters).
const std::vector<std::string> k_es = {
    "el", "la", "los", "las", "un", "una", "mi", "tu", "su", "nuestro", "este", "esa", "casa", "perro",
    "gato", "niño", "niña", "madre", "padre", "hermano", "hermana", "amigo", "amiga", "mesa", "silla",
    "puerta", "ventana", "libro", "carta", "papel", "agua", "leche", "pan", "queso", "fruta", "manzana",
    "naranja", "café", "vino", "ciudad", "pueblo", "calle", "camino", "río", "mar", "playa", "montaña",
    "campo", "árbol", "flor", "jardín", "cielo", "sol", "luna", "estrella", "lluvia", "nieve", "viento",
    "noche", "día", "mañana", "tarde", "semana", "año", "hora", "tiempo", "trabajo", "escuela", "maestro",
    "médico", "coche", "tren", "barco", "avión", "dinero", "mercado", "tienda", "iglesia", "plaza", "música",
    "canción", "voz", "historia", "pregunta", "respuesta", "idea", "problema", "mano", "cabeza", "ojo",
    "boca", "corazón", "grande", "pequeño", "viejo", "nuevo", "bueno", "malo", "rojo", "azul", "verde",
    "blanco", "negro", "amarillo", "caliente", "frío", "rápido", "lento", "feliz", "triste", "fuerte",
    "débil", "limpio", "sucio", "dulce", "largo", "corto", "alto", "bajo", "bonito", "feo", "come", "bebe",
    "canta", "habla", "escribe", "lee", "mira", "busca", "encuentra", "lleva", "trae", "compra", "vende",
    "abre", "cierra", "llama", "espera", "vive", "trabaja", "juega", "camina", "corre", "sube", "baja",
    "piensa", "quiere", "puede", "tiene", "hace", "dice", "sabe", "conoce", "siempre", "nunca", "hoy", "ayer",
    "ahora", "aquí", "allí", "muy", "también", "pronto", "juntos", "despacio", "con", "sin", "para", "por",
    "desde", "hasta", "sobre", "entre", "hacia", "y", "pero", "porque", "cuando", "chico", "chocolate",
    "jamón", "zapato", "guitarra", "llave", "yerba", "hueso", "cigüeña", "ñandú"};

const std::vector<std::string> k_de = {
    "der", "die", "das", "ein", "eine", "mein", "dein", "sein", "unser", "dieser", "jeder", "Haus", "Hund",
    "Katze", "Kind", "Mutter", "Vater", "Bruder", "Schwester", "Freund", "Freundin", "Tisch", "Stuhl", "Tür",
    "Fenster", "Buch", "Brief", "Papier", "Wasser", "Milch", "Brot", "Käse", "Apfel", "Kaffee", "Wein",
    "Stadt", "Dorf", "Straße", "Weg", "Fluss", "Meer", "Strand", "Berg", "Feld", "Baum", "Blume", "Garten",
    "Himmel", "Sonne", "Mond", "Stern", "Regen", "Schnee", "Wind", "Nacht", "Tag", "Morgen", "Abend", "Woche",
    "Jahr", "Stunde", "Zeit", "Arbeit", "Schule", "Lehrer", "Arzt", "Auto", "Zug", "Schiff", "Flugzeug",
    "Geld", "Markt", "Laden", "Kirche", "Platz", "Musik", "Lied", "Stimme", "Geschichte", "Frage", "Antwort",
    "Idee", "Hand", "Kopf", "Auge", "Mund", "Herz", "groß", "klein", "alt", "neu", "gut", "schlecht", "rot",
    "blau", "grün", "weiß", "schwarz", "gelb", "warm", "kalt", "schnell", "langsam", "froh", "traurig",
    "stark", "schwach", "sauber", "schmutzig", "süß", "lang", "kurz", "hoch", "tief", "schön", "hässlich",
    "isst", "trinkt", "singt", "spricht", "schreibt", "liest", "sieht", "sucht", "findet", "trägt", "bringt",
    "kauft", "verkauft", "öffnet", "schließt", "ruft", "wartet", "wohnt", "arbeitet", "spielt", "geht",
    "läuft", "denkt", "will", "kann", "hat", "macht", "sagt", "kennt", "immer", "nie", "heute", "gestern",
    "jetzt", "hier", "dort", "sehr", "auch", "bald", "spät", "zusammen", "mit", "ohne", "für", "durch",
    "nach", "über", "unter", "zwischen", "und", "aber", "weil", "wenn", "Küche", "Bäcker", "Brücke", "Löffel",
    "Mädchen", "Zwiebel", "Pferd", "Fuchs", "Vogel", "zwölf", "fünf"};

const std::vector<std::string> k_fr = {
    "le", "la", "les", "un", "une", "mon", "ton", "son", "notre", "ce", "cette", "chaque", "maison", "chien",
    "chat", "enfant", "mère", "père", "frère", "sœur", "ami", "amie", "table", "chaise", "porte", "fenêtre",
    "livre", "lettre", "papier", "eau", "lait", "pain", "fromage", "pomme", "orange", "café", "vin", "ville",
    "village", "rue", "chemin", "rivière", "mer", "plage", "montagne", "champ", "arbre", "fleur", "jardin",
    "ciel", "soleil", "lune", "étoile", "pluie", "neige", "vent", "nuit", "jour", "matin", "soir", "semaine",
    "année", "heure", "temps", "travail", "école", "maître", "médecin", "voiture", "train", "bateau", "avion",
    "argent", "marché", "magasin", "église", "place", "musique", "chanson", "voix", "histoire", "question",
    "réponse", "idée", "problème", "main", "tête", "œil", "bouche", "cœur", "grand", "petit", "vieux",
    "nouveau", "bon", "mauvais", "rouge", "bleu", "vert", "blanc", "noir", "jaune", "chaud", "froid",
    "rapide", "lent", "heureux", "triste", "fort", "faible", "propre", "sale", "doux", "long", "court",
    "haut", "bas", "beau", "mange", "boit", "chante", "parle", "écrit", "lit", "regarde", "cherche", "trouve",
    "apporte", "achète", "vend", "ouvre", "ferme", "appelle", "attend", "habite", "travaille", "joue",
    "marche", "pense", "veut", "peut", "fait", "dit", "sait", "connaît", "toujours", "jamais", "aujourd'hui",
    "hier", "maintenant", "ici", "là", "très", "aussi", "bientôt", "tard", "ensemble", "avec", "sans", "pour",
    "par", "depuis", "sur", "sous", "entre", "vers", "et", "mais", "parce", "quand", "garçon", "fille",
    "cuisine", "oiseau", "cheval", "poisson", "bonjour", "merci", "vingt", "huit"};

const std::vector<std::string> k_it = {
    "il", "la", "lo", "gli", "le", "un", "una", "mio", "tuo", "suo", "nostro", "questo", "quella", "ogni", "casa",
    "cane", "gatto", "bambino", "bambina", "madre", "padre", "fratello", "sorella", "amico", "amica", "tavolo",
    "sedia", "porta", "finestra", "libro", "lettera", "carta", "acqua", "latte", "pane", "formaggio", "frutta",
    "mela", "arancia", "caffè", "vino", "città", "paese", "strada", "cammino", "fiume", "mare", "spiaggia",
    "montagna", "campo", "albero", "fiore", "giardino", "cielo", "sole", "luna", "stella", "pioggia", "neve",
    "vento", "notte", "giorno", "mattina", "sera", "settimana", "anno", "ora", "tempo", "lavoro", "scuola",
    "maestro", "medico", "macchina", "treno", "barca", "aereo", "soldi", "mercato", "negozio", "chiesa",
    "piazza", "musica", "canzone", "voce", "storia", "domanda", "risposta", "idea", "problema", "mano", "testa",
    "occhio", "bocca", "cuore", "grande", "piccolo", "vecchio", "nuovo", "buono", "cattivo", "rosso", "azzurro",
    "verde", "bianco", "nero", "giallo", "caldo", "freddo", "veloce", "lento", "felice", "triste", "forte",
    "debole", "pulito", "sporco", "dolce", "lungo", "corto", "alto", "basso", "bello", "brutto", "mangia",
    "beve", "canta", "parla", "scrive", "legge", "guarda", "cerca", "trova", "compra", "vende", "apre",
    "chiude", "chiama", "aspetta", "vive", "lavora", "gioca", "cammina", "corre", "sale", "scende", "pensa",
    "vuole", "può", "fa", "dice", "sa", "conosce", "sempre", "mai", "oggi", "ieri", "adesso", "qui", "molto",
    "anche", "presto", "tardi", "insieme", "con", "senza", "per", "da", "fino", "sopra", "sotto", "tra",
    "verso", "ma", "perché", "quando", "ragazzo", "ragazza", "cucina", "uccello", "cavallo", "pesce", "grazie",
    "famiglia", "zucchero", "chitarra", "scarpa", "gnocchi", "ghiaccio"};

const std::vector<std::string> k_nl = {
    "de", "het", "een", "mijn", "jouw", "zijn", "onze", "deze", "elke", "huis", "hond", "kat", "kind", "moeder",
    "vader", "broer", "zus", "vriend", "vriendin", "tafel", "stoel", "deur", "raam", "boek", "brief", "papier",
    "water", "melk", "brood", "kaas", "appel", "koffie", "wijn", "stad", "dorp", "straat", "weg", "rivier",
    "zee", "strand", "berg", "veld", "boom", "bloem", "tuin", "hemel", "zon", "maan", "ster", "regen",
    "sneeuw", "wind", "nacht", "dag", "ochtend", "avond", "week", "jaar", "uur", "tijd", "werk", "school",
    "leraar", "dokter", "auto", "trein", "boot", "vliegtuig", "geld", "markt", "winkel", "kerk", "plein",
    "muziek", "lied", "stem", "verhaal", "vraag", "antwoord", "idee", "probleem", "hand", "hoofd", "oog",
    "mond", "hart", "groot", "klein", "oud", "nieuw", "goed", "slecht", "rood", "blauw", "groen", "wit",
    "zwart", "geel", "warm", "koud", "snel", "langzaam", "blij", "verdrietig", "sterk", "zwak", "schoon",
    "vies", "zoet", "lang", "kort", "hoog", "laag", "mooi", "lelijk", "eet", "drinkt", "zingt", "spreekt",
    "schrijft", "leest", "ziet", "zoekt", "vindt", "draagt", "brengt", "koopt", "verkoopt", "opent", "sluit",
    "roept", "wacht", "woont", "werkt", "speelt", "loopt", "rent", "denkt", "wil", "kan", "heeft", "maakt",
    "zegt", "kent", "altijd", "nooit", "vandaag", "gisteren", "nu", "hier", "daar", "heel", "ook", "straks",
    "laat", "samen", "met", "zonder", "voor", "door", "naar", "onder", "tussen", "en", "maar", "omdat",
    "wanneer", "jongen", "meisje", "keuken", "vogel", "paard", "vis", "fiets", "gracht", "schaap", "ui",
    "huid", "duin", "reus", "sjaal", "gezicht"};

const std::vector<std::string> k_en = {
    "the", "a", "this", "that", "every", "some", "my", "his", "her", "our", "their", "your", "house", "dog",
    "cat", "child", "mother", "father", "brother", "sister", "friend", "table", "chair", "door", "window",
    "book", "letter", "paper", "water", "milk", "bread", "cheese", "apple", "coffee", "city", "village",
    "street", "road", "river", "sea", "beach", "mountain", "field", "tree", "flower", "garden", "sky", "sun",
    "moon", "star", "rain", "snow", "wind", "night", "day", "morning", "evening", "week", "year", "hour",
    "time", "work", "school", "teacher", "doctor", "car", "train", "boat", "plane", "money", "market", "shop",
    "church", "music", "song", "voice", "story", "question", "answer", "idea", "problem", "hand", "head",
    "eye", "mouth", "heart", "big", "small", "old", "new", "good", "bad", "red", "blue", "green", "white",
    "black", "yellow", "warm", "cold", "quick", "slow", "happy", "sad", "strong", "weak", "clean", "dirty",
    "sweet", "long", "short", "tall", "low", "pretty", "eats", "drinks", "sings", "speaks", "writes", "reads",
    "sees", "looks", "finds", "carries", "brings", "buys", "sells", "opens", "closes", "calls", "waits",
    "lives", "works", "plays", "walks", "runs", "thinks", "wants", "can", "has", "makes", "says", "knows",
    "always", "never", "today", "yesterday", "now", "here", "there", "very", "also", "soon", "late",
    "together", "with", "without", "for", "through", "from", "over", "under", "between", "and", "but",
    "because", "when", "measure", "vision", "treasure", "judge", "thing", "nothing", "bridge", "toy", "boy"};

const std::vector<std::string> k_cmn = {
    "是", "我", "中", "上", "说", "为", "时", "生", "之", "而", "于", "成", "事", "只", "无", "手", "十", "用", "长", "知", "外",
    "与", "实", "二", "月", "种", "声", "儿", "正", "位", "重", "政", "使", "世", "少", "五", "水", "市", "场", "师", "张", "常",
    "受", "王", "务", "制", "至", "物", "望", "直", "爱", "吃", "指", "往", "治", "周", "武", "城", "士", "众", "程", "语", "式",
    "识", "收", "未", "持", "始", "双", "越", "史", "商", "找", "委", "首", "失", "网", "石", "谁", "志", "争", "视", "微", "终",
    "示", "域", "睡", "唱"};

std::string lang_of(const std::string& code) {  // "es-419" -> "es"
  std::string l = code.substr(0, code.find('-'));
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return l;
}

}  // namespace

const std::vector<std::string>& espeak_text_languages() {
  static const std::vector<std::string> v = {"cmn", "de", "en", "es", "fr", "it", "nl"};
  return v;
}

const std::vector<std::string>* espeak_vocabulary(const std::string& language) {
  const std::string l = lang_of(language);
  if (l == "es") return &k_es;
  if (l == "de") return &k_de;
  if (l == "fr") return &k_fr;
  if (l == "en") return &k_en;
  if (l == "it") return &k_it;
  if (l == "nl") return &k_nl;
  if (l == "cmn" || l == "zh") return &k_cmn;
  return nullptr;
}

std::string espeak_sentence(const std::vector<std::string>& vocabulary, uint64_t seed) {
  Rng r(seed);
  const int words = 4 + r.below(7);  // 4..10
  std::string s;
  for (int i = 0; i < words; ++i) {
    if (i > 0) s += (i >= 2 && i + 2 <= words && r.uniform() < 0.12) ? ", " : " ";
    s += vocabulary[r.below(static_cast<int>(vocabulary.size()))];
  }
  return s + ".";
}

EspeakSpeaker espeak_speaker(const SynthSpeaker& spk, uint64_t seed) {
  Rng r(mix(mix(seed, hash_str(spk.id)), 0xe59eac));
  EspeakSpeaker e;
  const bool female = spk.id[0] == 'f';
  e.variant = female ? "f" + std::to_string(1 + r.below(5)) : "m" + std::to_string(1 + r.below(7));
  e.pitch = std::clamp(static_cast<int>(std::lround((female ? 55.0 : 40.0) + 8.0 * r.normal())), 15, 85);
  e.range = std::clamp(static_cast<int>(std::lround(50.0 + 12.0 * r.normal())), 20, 85);
  e.rate_wpm = std::clamp(static_cast<int>(std::lround(165.0 * std::exp(0.10 * r.normal()))), 120, 220);
  e.warp = std::clamp(std::exp(0.035 * r.normal()), 0.92, 1.08);
  e.gain = std::exp(0.2 * r.normal());
  return e;
}

EspeakTexts espeak_texts(const std::string& language, const std::string& text_file) {
  if (!espeak_built_in()) throw std::runtime_error(espeak_missing_message());
  espeak_check_language(language);
  EspeakTexts t;
  t.language = language;
  if (!text_file.empty()) {
    std::ifstream in(text_file, std::ios::binary);
    if (!in) throw std::runtime_error(text_file + ": cannot read the --text file");
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") != std::string::npos) t.lines.push_back(line);
    }
    if (t.lines.empty()) throw std::runtime_error(text_file + ": no sentences (one per line) in the --text file");
    return t;
  }
  const std::vector<std::string>* v = espeak_vocabulary(language);
  if (!v) {
    std::string known;
    for (const auto& l : espeak_text_languages()) known += " " + l;
    throw std::invalid_argument("synth --language " + language + ": no shipped word list for it (shipped:" + known +
                                "); give sentences, one per line, with --text FILE");
  }
  t.vocabulary = *v;
  return t;
}

SynthUtterance synth_espeak_utterance(const SynthSpeaker& spk, const EspeakTexts& texts, uint64_t seed, int index,
                                      bool sa, double noise_db) {
  const EspeakSpeaker es = espeak_speaker(spk, seed);
  Rng rng(mix(mix(seed, hash_str(spk.id)), static_cast<uint64_t>(index) + (sa ? 1000003 : 0)));
  // SA sentences share their text across speakers (as in TIMIT)
  Rng text_rng(sa ? mix(seed, 0x5a5a) : rng.next());
  const std::string text = texts.lines.empty()
                               ? espeak_sentence(texts.vocabulary, text_rng.next())
                               : texts.lines[text_rng.below(static_cast<int>(texts.lines.size()))];
  EspeakRequest req;
  req.language = texts.language;
  req.variant = es.variant;
  req.text = text;
  req.pitch = std::clamp(es.pitch + static_cast<int>(std::lround(3.0 * rng.normal())), 0, 100);
  req.range = es.range;
  req.rate_wpm = static_cast<int>(std::lround(es.rate_wpm * std::exp(0.05 * rng.normal())));
  req.rand_seed = static_cast<unsigned>(rng.next() >> 33);
  const EspeakOutput out = espeak_speak(req);
  if (out.samples.empty() || out.phones.empty()) throw std::runtime_error("espeak-ng: empty utterance for \"" + text + "\"");

  // ---- leading and trailing silence (100-250 ms at espeak's rate), then the speaker's
  // warp and the 16 kHz output rate by libsoxr; boundaries scaled to the new rate ----
  const int64_t lead = std::llround(out.sample_rate * (0.10 + 0.15 * rng.uniform()));
  const int64_t trail = std::llround(out.sample_rate * (0.10 + 0.15 * rng.uniform()));
  std::vector<float> xf(static_cast<size_t>(lead), 0.0f);
  xf.insert(xf.end(), out.samples.begin(), out.samples.end());
  xf.insert(xf.end(), static_cast<size_t>(trail), 0.0f);
  const int from = static_cast<int>(std::lround(out.sample_rate * es.warp));
  const std::vector<float> y = resample(xf, from, kRate);
  const int64_t N = static_cast<int64_t>(y.size());
  const int64_t N0 = static_cast<int64_t>(xf.size());
  auto at16k = [&](int64_t n) { return std::min<int64_t>(N, std::llround(static_cast<double>(n) * kRate / from)); };
  SynthUtterance u;
  u.text = text;
  std::vector<int> word_of;  // per phone of u
  auto add = [&](int64_t end, const std::string& label, int word) {
    const int64_t start = u.phones.empty() ? 0 : u.phones.back().end;
    if (end <= start) return;
    if (!u.phones.empty() && label == kEspeakSilence && u.phones.back().label == kEspeakSilence) {
      u.phones.back().end = end;
      return;
    }
    u.phones.push_back({start, end, label});
    word_of.push_back(word);
  };
  add(at16k(lead), kEspeakSilence, -1);
  for (size_t i = 0; i < out.phones.size(); ++i) {
    const EspeakPhone& p = out.phones[i];
    add(at16k(lead + p.end), p.label, p.word);
  }
  add(at16k(N0), kEspeakSilence, -1);
  if (u.phones.empty() || u.phones.back().end != N) {
    if (!u.phones.empty() && u.phones.back().end < N) add(N, kEspeakSilence, -1);
    else throw std::runtime_error("espeak-ng: no phones for \"" + text + "\"");
  }
  // ---- words: the span of their phones (a word spoken twice in a row stays two words) ----
  for (size_t i = 0; i < u.phones.size(); ++i) {
    const int w = word_of[i];
    if (w < 0 || w >= static_cast<int>(out.words.size())) continue;
    if (i > 0 && word_of[i - 1] == w && !u.words.empty()) u.words.back().end = u.phones[i].end;
    else u.words.push_back({u.phones[i].start, u.phones[i].end, out.words[static_cast<size_t>(w)]});
  }

  // ---- loudness (speech RMS to 3000 x the speaker's gain) and a noise floor (synth_detail::level_and_noise) ----
  u.samples = synth_detail::level_and_noise(
      y, u.phones, [](const std::string& l) { return l == kEspeakSilence; },
      [&](double speech_rms) { return es.gain * 3000.0 / std::max(speech_rms, 1.0); }, noise_db, rng);
  return u;
}

}  // namespace timitseg::data
