-- The methods, one line each: the module lua/divgpu/methods/NAME.lua
-- implements the interface in lua/divgpu/methods.lua. Adding a method is
-- its folder of files (shader, descriptor, module, proof) plus its line here
-- (docs/architecture.md#adding-a-method). The order is the listing's: the
-- reference, direct, first.
return {
    "direct",
    "gram",
    "tensor",
    "cpu",
}
