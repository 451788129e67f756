# Test tools, each built from its own module under test/tools/ so that their
# replace directives never touch the provider's go.mod. Built once into bin/.
tools:
