//! Rebuild when a migration of the example application changes:
//! `embed_migrations!` reads the folder at compile time, and cargo does not
//! know it is an input unless told.

fn main() {
    println!("cargo:rerun-if-changed=src/example/migrations");
}
