// The recipe and patch trees are embedded with include_dir; rebuild when they change.
fn main() {
    println!("cargo:rerun-if-changed=recipes");
    println!("cargo:rerun-if-changed=patches");
}
