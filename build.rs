//! Rebuild when a migration is added or changed: `embed_migrations!`
//! reads the migration folders at compile time, and cargo does not know
//! they are inputs unless told.

fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
