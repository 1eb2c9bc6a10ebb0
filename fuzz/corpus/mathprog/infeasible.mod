var x >= 0 integer;
minimize z: x;
s.t. a: x >= 5;
s.t. b: x <= 3;
end;
