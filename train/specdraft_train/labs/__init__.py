"""What a lab's folder holds by the kind of lab, and the reports written from it."""
