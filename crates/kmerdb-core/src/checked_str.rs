//! Deserialisers of the strings in an index's metadata that read them as `&str`: bincode then
//! checks a string's length against the bytes that are there before it takes them. Read as a
//! `String`, bincode first allocates whatever length the file claims, and a damaged length (in an
//! index whose checksums were made to match, or were not checked) aborted the process on a failed
//! allocation of up to 2^64 bytes instead of being an error.
//!
//! Below both the index format and the taxonomy (whose taxa the index stores).

use serde::de::{Deserialize, Deserializer, SeqAccess, Visitor};
use std::fmt;

struct Str;

impl Visitor<'_> for Str {
    type Value = String;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_str<E>(self, v: &str) -> Result<String, E> {
        Ok(v.to_owned())
    }

    fn visit_string<E>(self, v: String) -> Result<String, E> {
        Ok(v)
    }
}

/// A `String`, read through `deserialize_str`.
pub(crate) fn string<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    d.deserialize_str(Str)
}

struct Checked(String);

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        string(d).map(Checked)
    }
}

struct Strings;

impl<'de> Visitor<'de> for Strings {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list of strings")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
        // The claimed length is not trusted with an allocation either.
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(Checked(s)) = seq.next_element()? {
            out.push(s);
        }
        Ok(out)
    }
}

/// A `Vec<String>`, each read as [`string`].
pub(crate) fn strings<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_seq(Strings)
}
